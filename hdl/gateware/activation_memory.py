"""The activation memory and the ports its clients share.

One simple-dual-port memory of ``bank_width`` lanes a word holds every tensor of the
program. Only one op runs at a time, so arbitration is a selection: the sequencer names
the reader (:class:`Reader`); writes never collide (the loader writes only while nothing
runs, an op writes only its own output), and a fixed priority picks among them.
"""
from amaranth import Module, signed, unsigned
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out


def read_port(addr_bits: int, lanes: int, data_bits: int) -> wiring.Signature:
    """A read: the address out, the word back one cycle later."""
    return wiring.Signature({"addr": Out(unsigned(addr_bits)),
                             "data": In(data.ArrayLayout(signed(data_bits), lanes))})


def write_layout(addr_bits: int, lanes: int, data_bits: int) -> data.StructLayout:
    return data.StructLayout({"addr": unsigned(addr_bits),
                              "data": data.ArrayLayout(signed(data_bits), lanes),
                              "lanes": unsigned(lanes)})       # lane write enables


def write_port(addr_bits: int, lanes: int, data_bits: int) -> stream.Signature:
    """Writes flow without back-pressure: the memory takes one every cycle."""
    return stream.Signature(write_layout(addr_bits, lanes, data_bits), always_ready=True)


class Reader(enum.Enum, shape=2):
    GEMM = 0
    POOL = 1
    OUTPUT = 2


class ActivationMemory(wiring.Component):
    """Members
    -------
    reader: In, who owns the read port.
    gemm_read, pool_read, output_read: In, the read ports of the clients.
    load, gemm_write, pool_write: In, write streams, in priority order.
    """
    WRITERS = ("load", "gemm_write", "pool_write")
    READERS = {Reader.GEMM: "gemm_read", Reader.POOL: "pool_read", Reader.OUTPUT: "output_read"}

    def __init__(self, depth: int, addr_bits: int, lanes: int, data_bits: int):
        self._depth, self._lanes, self._data_bits = depth, lanes, data_bits
        members = {"reader": In(Reader)}
        members |= {name: In(read_port(addr_bits, lanes, data_bits)) for name in self.READERS.values()}
        members |= {name: In(write_port(addr_bits, lanes, data_bits)) for name in self.WRITERS}
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.memory = mem = memory.Memory(shape=unsigned(self._lanes * self._data_bits),
                                                  depth=self._depth, init=[])
        wr = mem.write_port(granularity=self._data_bits)
        rd = mem.read_port()

        writers = [getattr(self, name) for name in self.WRITERS]
        for index, writer in enumerate(writers):
            cond = m.If if index == 0 else m.Elif
            with cond(writer.valid):
                m.d.comb += [wr.en.eq(writer.payload.lanes), wr.addr.eq(writer.payload.addr),
                             wr.data.eq(writer.payload.data)]

        with m.Switch(self.reader):
            for reader, name in self.READERS.items():
                with m.Case(reader):
                    m.d.comb += rd.addr.eq(getattr(self, name).addr)
        for name in self.READERS.values():
            m.d.comb += getattr(self, name).data.eq(rd.data)
        return m
