"""The activation memory and the ports its clients share.

Words of ``bank_width`` lanes hold every tensor of the program, interleaved over
:data:`BANKS` banks (word ``a`` in bank ``a % BANKS``), so that consecutive words are read
in one cycle: a folded convolution's tile spans two, a max-pool reads up to four of a
pixel's channels at once. Only one op runs at a time, so arbitration is a selection: the
sequencer names the reader (:class:`Reader`); writes never collide (the loader writes
only while nothing runs, an op writes only its own output), and a fixed priority picks
among them. No reader uses a word read in the cycle it is written (an op never reads
its own output; lanes read past a tensor are dropped), so the banks are
:mod:`collision-free memories <hdl.gateware.collisions>` (``tests/test_collisions.py``
checks it on whole inferences).
"""
from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.compiler.program import READ_WORDS
from hdl.gateware.collisions import collision_free_memory
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
    #: block RAM's, a register of its data, a plain register of that (the route across the
    #: chip), then a register of the words in read order.
    READ_LATENCY = 5
    #: Cycles from a write at its port to the first read (its address at a read port) that
    #: sees it: the port's register, the bank's (after the selection among writers and the
    #: bank addresses) and the chunks'. A read a cycle earlier collides with it (what it
    #: returns is unspecified); one earlier still reads the old word.
    WRITE_LATENCY = 3
    #: Entries of a bank's chunk: the depth of an ECP5 block RAM at its widest (512 x 36).
    CHUNK_ENTRIES = 512

    def __init__(self, depth: int, addr_bits: int, lanes: int, data_bits: int, load_words: int = 1,
                 pool_words: int = BANKS, gemm_write_words: int = 1, gemm_words: int = 2,
                 chunk_entries: int = CHUNK_ENTRIES):
        if not isinstance(chunk_entries, int) or chunk_entries < 2 or chunk_entries & (chunk_entries - 1):
            raise ValueError(f"chunk entries must be a power of two of at least 2, not {chunk_entries!r}")
        self._depth, self._lanes, self._data_bits = depth, lanes, data_bits
        self._chunk_entries = chunk_entries
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
        # A bank deeper than a block RAM is built of chunks of CHUNK_ENTRIES entries, each
        # with its own data register beside it, and the chunk is picked after those
        # registers: left to Yosys, the block RAMs of a deep bank are chained by a
        # multiplexer between their outputs (slow: clock-to-output 5.8 ns on ECP5) and one
        # register far from most of them (the 8x8 design's critical path at 86 MHz).
        depth = max(2, -(-self._depth // BANKS) + 1)
        chunk_bits = self._chunk_entries.bit_length() - 1
        sizes = [min(self._chunk_entries, depth - start) for start in range(0, depth, self._chunk_entries)]
        chunks = [[collision_free_memory(shape=word, depth=max(2, size), init=[]) for size in sizes]
                  for _ in range(BANKS)]
        for index, bank in enumerate(chunks):
            for number, chunk in enumerate(bank):
                m.submodules[f"bank{index}" if len(bank) == 1 else f"bank{index}_chunk{number}"] = chunk
        writes = [SimpleNamespace(addr=Signal(range(depth), name=f"bank{index}_waddr"),
                                  data=Signal(word, name=f"bank{index}_wdata"),
                                  en=Signal(self._lanes, name=f"bank{index}_wen")) for index in range(BANKS)]

        # Each writer's port is registered here, before the selection and the bank
        # addresses' adders. (No reset but the valid bits'.)
        writers = []
        for name in self.WRITERS:
            port = getattr(self, name)
            held = SimpleNamespace(valid=Signal(name=f"{name}_valid"),
                                   payload=Signal.like(port.payload, name=f"{name}_payload", reset_less=True))
            m.d.sync += [held.valid.eq(port.valid), held.payload.eq(port.payload)]
            writers.append(held)
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
        bank_addr = [Signal(range(depth), name=f"bank{number}_addr") for number in range(BANKS)]
        for number, reg in enumerate(bank_addr):
            m.d.sync += reg.eq((addr + ((number - first_bank) & (BANKS - 1))) >> shift)
        # Each chunk's read data is registered beside it: the block RAM's clock-to-output
        # time is long, and the chunk selection, the reordering and the readers' logic come
        # after it. (No reset: the estimate moves the register into the block RAM's output
        # register, hdl.tools.fpga_estimate.pack_bram_output_registers.)
        bank_data = [Signal(word, name=f"bank{index}_data") for index in range(BANKS)]
        for index, (bank, wr, rd_addr) in enumerate(zip(chunks, writes, bank_addr)):
            chunk_data = [Signal(word, name=f"bank{index}_chunk{number}_data", reset_less=True)
                          for number in range(len(bank))]
            # A write is registered twice more before it reaches the bank's block RAMs: the
            # bank's write, with the chunk it goes to decoded (a register a chunk), after
            # the selection and the adders; then the chunks' address, data and enables, the
            # enables from those registers by one gate. The block RAMs of a bank lie across
            # the chip, and the route to them took a cycle with the logic before it: from
            # the port's register through the adder to a chunk's enable was the default
            # design's critical path at 94.4 MHz (3.5 ns of route, then 1.4 ns more, then
            # the adder and three gates). Now each route leaves a register and ends at a
            # register or within one gate of one.
            bank_addr_w = Signal(range(depth), name=f"bank{index}_staged_addr", reset_less=True)
            bank_data_w = Signal(word, name=f"bank{index}_staged_data", reset_less=True)
            bank_en_w = Signal(self._lanes, name=f"bank{index}_staged_en")
            to_chunk = Signal(len(bank), name=f"bank{index}_staged_chunk", reset_less=True)
            m.d.sync += [bank_addr_w.eq(wr.addr), bank_data_w.eq(wr.data), bank_en_w.eq(wr.en),
                         to_chunk.eq(1 if len(bank) == 1 else Const(1, len(bank)) << wr.addr[chunk_bits:])]
            write_addr = Signal(range(depth), name=f"bank{index}_write_addr", reset_less=True)
            write_data = Signal(word, name=f"bank{index}_write_data", reset_less=True)
            m.d.sync += [write_addr.eq(bank_addr_w), write_data.eq(bank_data_w)]
            for number, (chunk, data_reg) in enumerate(zip(bank, chunk_data)):
                write, read = chunk.write_port(granularity=self._data_bits), chunk.read_port()
                enable = Signal(self._lanes, name=f"bank{index}_chunk{number}_write_en")
                m.d.sync += enable.eq(Mux(to_chunk[number], bank_en_w, 0))
                m.d.comb += [write.addr.eq(write_addr), write.data.eq(write_data), write.en.eq(enable),
                             read.addr.eq(rd_addr)]
                m.d.sync += data_reg.eq(read.data)
            # Each chunk's data is registered once more, with no logic before or after it
            # but the chunk selection: a bank's block RAMs lie across the chip (170 of the
            # ECP5-85F's 208 in the default design), and the route from the farthest to the
            # selection was 6.3 ns of the default design's 10.1 ns critical path at 99.4 MHz.
            # The register splits that route in two.
            held = [delayed(m, data_reg, 1, f"bank{index}_chunk{number}_held")
                    for number, data_reg in enumerate(chunk_data)]
            if len(bank) == 1:
                m.d.comb += bank_data[index].eq(held[0])
                continue
            # (The chunk's read and its two data registers: the read latency after the address register.)
            with m.Switch(delayed(m, rd_addr[chunk_bits:], self.READ_LATENCY - 2, f"bank{index}_at_chunk")):
                for number, data_reg in enumerate(held):
                    with m.Case(number):
                        m.d.comb += bank_data[index].eq(data_reg)
        # Word k of the read comes from bank (first_bank + k) % BANKS. The words are
        # registered in read order before they leave for the readers: the chunk selection
        # and the reordering are one cycle, the route to the readers and their lane
        # selection the next (together 12.4 ns on ECP5-85F, the default design's critical
        # path at 80.6 MHz). (No reset: a word is used only the read latency after its read.)
        ordered = [Signal(word, name=f"word{k}", reset_less=True) for k in range(BANKS)]
        with m.Switch(delayed(m, first_bank, self.READ_LATENCY - 1, "at_data")):
            for first in range(BANKS):
                with m.Case(first):
                    m.d.sync += [ordered[k].eq(bank_data[(first + k) % BANKS]) for k in range(BANKS)]
        for name, words in self._readers.values():
            m.d.comb += getattr(self, name).data.eq(Cat(*ordered[:words]))
        return m
