"""The activation memory and the ports its clients share.

Words of ``bank_width`` lanes hold every tensor of the program, in two banks: even words
in one, odd words in the other, so that any two consecutive words are read in one cycle
(a folded convolution's tile spans two; see :mod:`hdl.compiler.program`). Only one op
runs at a time, so arbitration is a selection: the sequencer names the reader
(:class:`Reader`); writes never collide (the loader writes only while nothing runs, an op
writes only its own output), and a fixed priority picks among them.
"""
from amaranth import Cat, Module, Signal, signed, unsigned
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out


def read_port(addr_bits: int, lanes: int, data_bits: int) -> wiring.Signature:
    """A read: the address out, the word back one cycle later."""
    return wiring.Signature({"addr": Out(unsigned(addr_bits)),
                             "data": In(data.ArrayLayout(signed(data_bits), lanes))})


def pair_read_port(addr_bits: int, lanes: int, data_bits: int) -> wiring.Signature:
    """A read of two consecutive words: ``data`` holds word ``addr`` then ``addr + 1``."""
    return wiring.Signature({"addr": Out(unsigned(addr_bits)),
                             "data": In(data.ArrayLayout(signed(data_bits), 2 * lanes))})


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
    gemm_read, pool_read: In, pair read ports; output_read: In, a read port.
    load, gemm_write, pool_write: In, write streams, in priority order.
    """
    WRITERS = ("load", "gemm_write", "pool_write")
    READERS = {Reader.GEMM: "gemm_read", Reader.POOL: "pool_read", Reader.OUTPUT: "output_read"}

    def __init__(self, depth: int, addr_bits: int, lanes: int, data_bits: int):
        self._depth, self._lanes, self._data_bits = depth, lanes, data_bits
        members = {"reader": In(Reader)}
        members |= {name: In(pair_read_port(addr_bits, lanes, data_bits)) for name in ("gemm_read", "pool_read")}
        members |= {"output_read": In(read_port(addr_bits, lanes, data_bits))}
        members |= {name: In(write_port(addr_bits, lanes, data_bits)) for name in self.WRITERS}
        self._addr_bits = addr_bits
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        word = unsigned(self._lanes * self._data_bits)
        # Word a is entry a >> 1 of bank a & 1; reading a and a + 1 reads entry (a + 1) >> 1
        # of the even bank and a >> 1 of the odd one.
        # (At least two entries: Yosys's SMT back end cannot take a memory of one.)
        m.submodules.even = even = memory.Memory(shape=word, depth=max(2, self._depth // 2 + 1), init=[])
        m.submodules.odd = odd = memory.Memory(shape=word, depth=max(2, (self._depth + 1) // 2), init=[])
        banks = (even, odd)
        writes = [bank.write_port(granularity=self._data_bits) for bank in banks]
        reads = [bank.read_port() for bank in banks]

        writers = [getattr(self, name) for name in self.WRITERS]
        for index, writer in enumerate(writers):
            cond = m.If if index == 0 else m.Elif
            with cond(writer.valid):
                odd_word = writer.payload.addr[0]
                for parity, wr in enumerate(writes):
                    m.d.comb += [wr.addr.eq(writer.payload.addr >> 1), wr.data.eq(writer.payload.data)]
                    with m.If(odd_word == parity):
                        m.d.comb += wr.en.eq(writer.payload.lanes)

        addr = Signal(self._addr_bits + 1)
        with m.Switch(self.reader):
            for reader, name in self.READERS.items():
                with m.Case(reader):
                    m.d.comb += addr.eq(getattr(self, name).addr)
        m.d.comb += [reads[0].addr.eq((addr + 1) >> 1), reads[1].addr.eq(addr >> 1)]
        odd_first = Signal()
        m.d.sync += odd_first.eq(addr[0])
        first, second = Signal(word), Signal(word)
        m.d.comb += [first.eq(reads[0].data), second.eq(reads[1].data)]
        with m.If(odd_first):
            m.d.comb += [first.eq(reads[1].data), second.eq(reads[0].data)]
        m.d.comb += [self.gemm_read.data.eq(Cat(first, second)), self.pool_read.data.eq(Cat(first, second)),
                     self.output_read.data.eq(first)]
        return m
