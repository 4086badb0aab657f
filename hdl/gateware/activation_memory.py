"""The activation memory and the ports its clients share.

Words of ``bank_width`` lanes hold every tensor of the program, interleaved over
:data:`BANKS` banks (word ``a`` in bank ``a % BANKS``), so that consecutive words are read
in one cycle: a folded convolution's tile spans two, a max-pool reads up to four of a
pixel's channels at once. Only one op runs at a time, so arbitration is a selection: the
sequencer names the reader (:class:`Reader`); writes never collide (the loader writes
only while nothing runs, an op writes only its own output), and a fixed priority picks
among them.
"""
from amaranth import Cat, Module, Signal, signed, unsigned
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.compiler.program import READ_WORDS
from hdl.gateware.pipeline import delayed


def read_port(addr_bits: int, lanes: int, data_bits: int) -> wiring.Signature:
    """A read: the address out, the word back :attr:`ActivationMemory.READ_LATENCY` cycles later."""
    return window_read_port(addr_bits, lanes, data_bits, 1)


#: Banks of the activation memory: the most consecutive words one read returns.
BANKS = READ_WORDS


def window_read_port(addr_bits: int, lanes: int, data_bits: int, words: int) -> wiring.Signature:
    """A read of ``words`` consecutive words: ``data`` holds words ``addr``, ``addr + 1``, ..."""
    if not 1 <= words <= BANKS:
        raise ValueError(f"a read takes 1 to {BANKS} words, not {words}")
    return wiring.Signature({"addr": Out(unsigned(addr_bits)),
                             "data": In(data.ArrayLayout(signed(data_bits), words * lanes))})


def write_layout(addr_bits: int, lanes: int, data_bits: int, words: int = 1) -> data.StructLayout:
    """A write of ``words`` consecutive words from ``addr`` on, with lane write enables."""
    return data.StructLayout({"addr": unsigned(addr_bits),
                              "data": data.ArrayLayout(signed(data_bits), words * lanes),
                              "lanes": unsigned(words * lanes)})


def write_port(addr_bits: int, lanes: int, data_bits: int, words: int = 1) -> stream.Signature:
    """Writes flow without back-pressure: the memory takes one every cycle."""
    if not 1 <= words <= BANKS:
        raise ValueError(f"a write takes 1 to {BANKS} words, not {words}")
    return stream.Signature(write_layout(addr_bits, lanes, data_bits, words), always_ready=True)


class Reader(enum.Enum, shape=2):
    GEMM = 0
    POOL = 1
    OUTPUT = 2


class ActivationMemory(wiring.Component):
    """Members
    -------
    reader: In, who owns the read port.
    gemm_read: In, ``gemm_words`` words a read; pool_read: In, ``pool_words``; output_read: In, one.
    load, gemm_write, pool_write: In, write streams, in priority order; ``load`` writes
    ``load_words`` consecutive words at once, ``gemm_write`` ``gemm_write_words``.
    """
    WRITERS = ("load", "gemm_write", "pool_write")
    #: Cycles from a read's address to its data: a register of each bank's address, the
    #: block RAM's, then a register of its data.
    READ_LATENCY = 3

    def __init__(self, depth: int, addr_bits: int, lanes: int, data_bits: int, load_words: int = 1,
                 pool_words: int = BANKS, gemm_write_words: int = 1, gemm_words: int = 2):
        self._depth, self._lanes, self._data_bits = depth, lanes, data_bits
        self._readers = {Reader.GEMM: ("gemm_read", gemm_words), Reader.POOL: ("pool_read", pool_words),
                        Reader.OUTPUT: ("output_read", 1)}
        members = {"reader": In(Reader)}
        members |= {name: In(window_read_port(addr_bits, lanes, data_bits, words))
                    for name, words in self._readers.values()}
        write_words = {"load": load_words, "gemm_write": gemm_write_words, "pool_write": 1}
        members |= {name: In(write_port(addr_bits, lanes, data_bits, write_words[name])) for name in self.WRITERS}
        self._addr_bits = addr_bits
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        word = unsigned(self._lanes * self._data_bits)
        shift = BANKS.bit_length() - 1
        # Entry e of bank b is word e * BANKS + b. (At least two entries a bank: Yosys's
        # SMT back end cannot take a memory of one.) A read past the last word reads junk.
        depth = max(2, -(-self._depth // BANKS) + 1)
        banks = [memory.Memory(shape=word, depth=depth, init=[]) for _ in range(BANKS)]
        for index, bank in enumerate(banks):
            m.submodules[f"bank{index}"] = bank
        writes = [bank.write_port(granularity=self._data_bits) for bank in banks]
        reads = [bank.read_port() for bank in banks]

        writers = [getattr(self, name) for name in self.WRITERS]
        for index, writer in enumerate(writers):
            cond = m.If if index == 0 else m.Elif
            with cond(writer.valid):
                # Word k of the write goes to bank (addr + k) % BANKS.
                words = len(writer.payload.data) // self._lanes
                start, lanes = writer.payload.addr[:shift], self._lanes
                for number, wr in enumerate(writes):
                    with m.Switch(start):
                        for first in range(BANKS):
                            k = (number - first) % BANKS
                            if k < words:
                                with m.Case(first):
                                    m.d.comb += [wr.addr.eq((writer.payload.addr + k) >> shift),
                                                 wr.data.eq(writer.payload.data.as_value()[
                                                     k * lanes * self._data_bits:(k + 1) * lanes * self._data_bits]),
                                                 wr.en.eq(writer.payload.lanes[k * lanes:(k + 1) * lanes])]

        addr = Signal(self._addr_bits + shift)
        with m.Switch(self.reader):
            for reader, (name, _) in self._readers.items():
                with m.Case(reader):
                    m.d.comb += addr.eq(getattr(self, name).addr)
        # Bank b holds the word of addr ... addr + BANKS - 1 that is b modulo BANKS.
        first_bank = addr[:shift]
        # Each bank's address is registered before it leaves for its block RAMs: the reader
        # selection and the address adder are one cycle, the long wires to the banks' block
        # RAMs the next (together 14 ns on ECP5-85F, the default design's critical path).
        for number, rd in enumerate(reads):
            bank_addr = Signal.like(rd.addr, name=f"bank{number}_addr")
            m.d.sync += bank_addr.eq((addr + ((number - first_bank) & (BANKS - 1))) >> shift)
            m.d.comb += rd.addr.eq(bank_addr)
        # Each bank's read data is registered beside it: the block RAM's clock-to-output
        # time is long, and the reordering and the readers' logic come after it.
        bank_data = [Signal(word, name=f"bank{index}_data") for index in range(BANKS)]
        m.d.sync += [reg.eq(rd.data) for reg, rd in zip(bank_data, reads)]
        # Word k of the read comes from bank (first_bank + k) % BANKS.
        ordered = [Signal(word, name=f"word{k}") for k in range(BANKS)]
        with m.Switch(delayed(m, first_bank, self.READ_LATENCY, "at_data")):
            for first in range(BANKS):
                with m.Case(first):
                    m.d.comb += [ordered[k].eq(bank_data[(first + k) % BANKS]) for k in range(BANKS)]
        for name, words in self._readers.values():
            m.d.comb += getattr(self, name).data.eq(Cat(*ordered[:words]))
        return m
