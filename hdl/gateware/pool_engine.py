"""Max-pooling as its own pass over the activation memory.

For each output pixel and each read of its channels (``words_per_read`` consecutive
words), the window's taps are read one a cycle and a running lane-wise maximum
is kept; taps outside the input read as ``MAXPOOL_PAD_VALUE`` (the smallest code, so they
never win, as PyTorch's -infinity padding). One read a cycle, no stalls. A read may take
``taps_per_read`` consecutive taps of a kernel row at once (their pixels are consecutive
words); their maximum is taken as the data arrives.

The finished lanes are written a word a cycle through a queue. A packed
destination (the input of a folded convolution) puts read ``q`` of pixel ``p`` at element
``p * C + q * lanes``, rotated across words; lanes past ``C`` are not written.
"""
from amaranth import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.compiler.program import PoolOp
from hdl.compiler.widths import Widths
from hdl.gateware.activation_memory import BANKS, ActivationMemory, window_read_port, write_port
from hdl.gateware.engine_busy import registered_busy, registered_start
from hdl.gateware.loop_end import end_flag
from hdl.gateware.pipeline import delay_line, delayed
from hdl.gateware.window import WindowAddress, window_layout, window_params
from pytorch_ref.ir import integer_semantics as sem


def pool_params_layout(w: Widths, bank_width: int) -> data.StructLayout:
    """``out_words``, ``out_lanes``: one output pixel's extent (``C`` elements when packed,
    else its words); ``last_lanes``: the lanes of its last word that are channels."""
    return data.StructLayout({"window": window_layout(w), "out_base": unsigned(w.act_addr),
                              "pixels": unsigned(w.pixel), "words": range(BANKS + 1), "read_lanes": range(BANKS * bank_width + 1),
                              "reads": unsigned(w.coord), "taps": range(BANKS + 1),
                              "out_words": unsigned(w.coord), "out_lanes": range(bank_width),
                              "last_lanes": range(BANKS * bank_width + 1)})


def pool_params(op: PoolOp, bank_width: int) -> dict:
    """:func:`pool_params_layout`'s values for ``op``."""
    dest, per_read = op.dest, op.words_per_read * bank_width
    if dest.packed_lanes:
        out_words, out_lanes = divmod(dest.channels, bank_width)
        last_lanes = dest.channels - (op.reads_per_pixel - 1) * per_read
    else:
        out_words, out_lanes = dest.words_per_pixel, 0
        last_lanes = (dest.words_per_pixel * bank_width) - (op.reads_per_pixel - 1) * per_read
    return {"window": window_params(op.source, op.dest, op.kernel, op.stride, op.padding),
            "out_base": dest.base, "pixels": dest.pixels, "words": op.words_per_read, "read_lanes": per_read,
            "reads": op.reads_per_pixel, "taps": op.taps_per_read, "out_words": out_words, "out_lanes": out_lanes, "last_lanes": last_lanes}


class PoolEngine(wiring.Component):
    """Members
    -------
    params: In, held while busy; start: In (pulse, ignored while busy); busy: Out, a register
    (:func:`~hdl.gateware.engine_busy.registered_busy`), low a cycle after the last write.
    read: the activation memory's read port of ``read_words`` words (``READ_LATENCY`` cycles
    after the address).

    ``read_words`` (the most any pool op of the program reads at once), ``packed``
    (whether any writes packed) and ``row_reads`` (the ``(taps_per_read, words_per_read)``
    of the ops that read several taps at once) size the data path: a design without them
    pays for none of it. :meth:`for_ops` derives them from the program's pool ops.
    write: writes of finished output words (whole words unless packed).
    """

    #: Cycles from a read's address to its data in the engine's register.
    DATA_LATENCY = ActivationMemory.READ_LATENCY + 1
    #: Cycles from a read's address to its taps' maximum (padding applied) in a register,
    #: which the running maximum takes.
    TAP_LATENCY = DATA_LATENCY + 1

    def __init__(self, widths: Widths, bank_width: int, data_bits: int, read_words: int = 1, packed: bool = False,
                 row_reads: tuple[tuple[int, int], ...] = ()):
        if not 1 <= read_words <= BANKS:
            raise ValueError(f"a pool read takes 1 to {BANKS} words, not {read_words}")
        for taps, words in row_reads:
            if taps < 2 or words < 1 or taps * words > read_words:
                raise ValueError(f"a read of {taps} taps of {words} words does not fit reads of {read_words} words")
        self._w, self._bank, self._data_bits = widths, bank_width, data_bits
        self._read_words, self._packed, self._row_reads = read_words, packed, tuple(sorted(set(row_reads)))
        super().__init__({
            "params": In(pool_params_layout(widths, bank_width)),
            "start": In(1),
            "busy": Out(1),
            "read": Out(window_read_port(widths.act_addr, bank_width, data_bits, read_words)),
            "write": Out(write_port(widths.act_addr, bank_width, data_bits)),
        })

    @classmethod
    def for_ops(cls, widths: Widths, bank_width: int, data_bits: int, ops: list[PoolOp]) -> "PoolEngine":
        """An engine sized for ``ops`` (a program's pool ops)."""
        return cls(widths, bank_width, data_bits, max([1] + [op.read_words for op in ops]),
                   any(op.dest.packed_lanes for op in ops),
                   tuple((op.taps_per_read, op.words_per_read) for op in ops if op.taps_per_read > 1))

    def elaborate(self, platform):
        m = Module()
        w, p = self._w, self.params
        g = p.window
        running = Signal()
        bank = self._bank
        oy, ox, q, i, j = (Signal(w.coord, name=n) for n in ("oy", "ox", "q", "i", "j"))
        word = Signal(w.coord)                      # the read's first word in the pixel: q * words
        # Where the output word goes (word, first lane), and where its pixel starts.
        out_addr, out_lane = Signal(w.act_addr, name="out_addr"), Signal(range(bank), name="out_lane")
        pix_addr, pix_lane = Signal(w.act_addr, name="pix_addr"), Signal(range(bank), name="pix_lane")
        ibase, pix = Signal(w.pixel), Signal(w.pixel)   # image's first input pixel; output pixel
        # Whether j is its row's last read (j + taps >= kw), a register computed for the
        # next j; and each other loop's end, a register too (:func:`end_flag`): compared in
        # the counters' own cycle, the ends and their carries were the unit's critical path.
        last_j = Signal()
        end_i, end_q, end_ox, end_oy, end_pix = (Signal(name=n) for n in (
            "end_i", "end_q", "end_ox", "end_oy", "end_pix"))
        last_tap = last_j & end_i
        last_read = end_q

        # Counters, innermost first: tap (i, j), read q of the pixel's channels, pixel.
        next_read = running & last_tap
        next_pixel = next_read & last_read
        # The start, registered here (ignored until the last write): gated by ``busy`` in
        # its own cycle, the sequencer's start register, the route to this engine, the gate
        # and the loops' resets were one cycle (after busy's round trip through a gate the
        # placer put beside the sequencer: the default design's critical path at 96.0 MHz).
        # The op's first read leaves a cycle later for it.
        started = registered_start(m, self.start, self.busy)
        start = started
        # The last indices minus one, registered: the parameters hold still while an op
        # runs (first compared a cycle after it starts).
        i_before, q_before, ox_before, oy_before = (Signal(w.coord, name=n) for n in (
            "i_before", "q_before", "ox_before", "oy_before"))
        pix_before = Signal(w.pixel, name="pix_before")
        m.d.sync += [i_before.eq(g.kh - 2), q_before.eq(p.reads - 2), ox_before.eq(g.out_w - 2),
                     oy_before.eq(g.out_h - 2), pix_before.eq(p.pixels - 2)]
        end_flag(m, end_i, i, i_before, g.kh == 1, reset=start | next_read, advance=running & last_j)
        end_flag(m, end_q, q, q_before, p.reads == 1, reset=start | next_pixel, advance=next_read)
        end_flag(m, end_ox, ox, ox_before, g.out_w == 1, reset=start | (next_pixel & end_ox), advance=next_pixel)
        end_flag(m, end_oy, oy, oy_before, g.out_h == 1, reset=start | (next_pixel & end_ox & end_oy),
                 advance=next_pixel & end_ox)
        end_flag(m, end_pix, pix, pix_before, p.pixels == 1, reset=start, advance=next_pixel)
        with m.If(start):
            m.d.sync += [running.eq(1), oy.eq(0), ox.eq(0), q.eq(0), word.eq(0), i.eq(0), j.eq(0),
                         out_addr.eq(p.out_base), out_lane.eq(0), pix_addr.eq(p.out_base), pix_lane.eq(0),
                         ibase.eq(0), pix.eq(0), last_j.eq(p.taps >= g.kw)]
        with m.If(running):
            m.d.sync += [j.eq(j + p.taps), last_j.eq(j + (p.taps << 1) >= g.kw)]
            with m.If(last_j):
                m.d.sync += [j.eq(0), i.eq(i + 1), last_j.eq(p.taps >= g.kw)]
            with m.If(last_tap):
                m.d.sync += [i.eq(0), out_addr.eq(out_addr + p.words), q.eq(q + 1), word.eq(word + p.words)]
        # out_words + 1, registered (the parameters hold still while an op runs), so that
        # both next addresses below are one adder each, side by side.
        out_words_1 = Signal(len(p.out_words) + 1, name="out_words_1")
        m.d.sync += out_words_1.eq(p.out_words + 1)
        with m.If(next_pixel):
            # The next pixel starts out_words words and out_lanes lanes on.
            lane_sum = Signal(range(2 * bank))
            next_addr, next_lane = Signal.like(pix_addr), Signal.like(pix_lane)
            m.d.comb += [lane_sum.eq(pix_lane + p.out_lanes), next_addr.eq(pix_addr + p.out_words),
                         next_lane.eq(lane_sum)]
            with m.If(lane_sum >= bank):
                m.d.comb += [next_addr.eq(pix_addr + out_words_1), next_lane.eq(lane_sum - bank)]
            m.d.sync += [pix_addr.eq(next_addr), pix_lane.eq(next_lane), out_addr.eq(next_addr),
                         out_lane.eq(next_lane)]
            m.d.sync += [q.eq(0), word.eq(0), pix.eq(pix + 1), ox.eq(ox + 1)]
            with m.If(end_ox):
                m.d.sync += [ox.eq(0), oy.eq(oy + 1)]
                with m.If(end_oy):
                    m.d.sync += [oy.eq(0), ibase.eq(ibase + g.in_pixels)]
            with m.If(end_pix):
                m.d.sync += running.eq(0)

        # Stage 0: the tap, registered; stages 1-3: its address (window pipeline).
        m.submodules.window = window = WindowAddress(w)
        tag = Signal(data.StructLayout({"valid": 1, "first": 1, "last": 1, "out_addr": w.act_addr,
                                        "out_lane": range(bank), "lanes": range(BANKS * bank + 1)}))
        m.d.sync += [tag.valid.eq(running), tag.first.eq((i == 0) & (j == 0)), tag.last.eq(last_tap),
                     tag.out_addr.eq(out_addr), tag.out_lane.eq(out_lane),
                     tag.lanes.eq(Mux(last_read, p.last_lanes, p.read_lanes)),
                     window.tap.oy.eq(oy), window.tap.ox.eq(ox), window.tap.i.eq(i), window.tap.j.eq(j),
                     window.tap.image_base.eq(ibase), window.tap.word.eq(word)]
        m.d.comb += [window.window.eq(g), self.read.addr.eq(window.addr)]
        tags = delay_line(m, tag, WindowAddress.LATENCY + self.TAP_LATENCY, "tag")

        # Data arrives from the memory's bank registers through its word reordering, and is
        # registered again here (the reordering and the route take a cycle of their own). A
        # read of several taps becomes one of their lane-wise maximum (a tree), padding
        # applied, registered; then a running maximum, lane-wise over the words: one
        # comparison a stage.
        at_data, pad = tags[-1], delayed(m, window.pad, self.DATA_LATENCY, "pad")
        read_lanes = self._read_words * bank
        read_data = Signal.like(self.read.data, name="read_data")
        m.d.sync += read_data.eq(self.read.data)
        read = Signal(data.ArrayLayout(signed(self._data_bits), read_lanes))
        m.d.comb += read.eq(read_data)
        for taps, words in self._row_reads:                 # (params are held until the last write)
            with m.If((p.taps == taps) & (p.words == words)):
                for lane in range(words * bank):
                    m.d.comb += read[lane].eq(_maximum([read_data[t * words * bank + lane] for t in range(taps)]))
        taps_max = Signal(data.ArrayLayout(signed(self._data_bits), read_lanes))
        m.d.sync += [taps_max[lane].eq(Mux(pad, sem.MAXPOOL_PAD_VALUE, read[lane])) for lane in range(read_lanes)]
        best = Signal(data.ArrayLayout(signed(self._data_bits), read_lanes))
        for lane in range(read_lanes):
            with m.If(at_data.first | (taps_max[lane] > best[lane])):
                m.d.sync += best[lane].eq(taps_max[lane])
        done = Signal()
        at_done = Signal.like(at_data)
        m.d.sync += [done.eq(at_data.valid & at_data.last), at_done.eq(at_data)]

        # The finished lanes, rotated to their place in the words from out_addr on, then
        # written a word a cycle (the lowering keeps the words that hold any lane no more
        # than the window's taps, so a queue is empty before the next one is loaded).
        slots = self._read_words + self._packed
        rotated = Signal(data.ArrayLayout(signed(self._data_bits), slots * bank))
        enables = Signal(slots * bank)
        with m.Switch(at_done.out_lane):
            for lane in (range(bank) if self._packed else [0]):
                with m.Case(lane):
                    for k in range(read_lanes):
                        m.d.comb += [rotated[lane + k].eq(best[k]), enables[lane + k].eq(k < at_done.lanes)]
        queue = [Signal(data.StructLayout({"addr": unsigned(w.act_addr),
                                           "data": data.ArrayLayout(signed(self._data_bits), bank),
                                           "lanes": unsigned(bank)}), name=f"queue{k}") for k in range(slots)]
        with m.If(done):
            for k, entry in enumerate(queue):
                m.d.sync += [entry.addr.eq(at_done.out_addr + k), entry.data.eq(rotated.as_value()[
                                 k * bank * self._data_bits:(k + 1) * bank * self._data_bits]),
                             entry.lanes.eq(enables[k * bank:(k + 1) * bank])]
        with m.Else():
            m.d.sync += [queue[k].eq(queue[k + 1]) for k in range(slots - 1)]
            m.d.sync += queue[-1].lanes.eq(0)
        m.d.comb += [self.write.valid.eq(queue[0].lanes.any()), self.write.payload.eq(queue[0])]
        activity = running | Cat(*(t.valid for t in tags)).any() | done | Cat(*(e.lanes for e in queue)).any()
        m.d.comb += self.busy.eq(registered_busy(m, activity | started, self.start))
        return m


def _maximum(values):
    """The largest of ``values`` (signed), as a balanced tree of comparisons."""
    while len(values) > 1:
        pairs = [Mux(a > b, a, b) for a, b in zip(values[::2], values[1::2])]
        values = pairs + values[len(pairs) * 2:]
    return values[0]
