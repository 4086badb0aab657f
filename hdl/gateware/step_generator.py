"""The address generator of GEMM ops: one step (activation vector x weight tile) a cycle.

It walks the loop nest of :mod:`hdl.compiler.program` with counters only, innermost first::

    for nt in n_tiles:                     # output-channel tile (weights: w_base + nt*k_tiles)
      for block of pixels (<= block):      # accumulators hold one block
        for (i, j, ct) in taps x channel tiles:   # kt, the reduction
          for pixel in block:              # consecutive steps, one accumulator each

(a folded op counts tiles of its kernel rows in ``j`` and has one ``ct``), then computes
the addresses in a feed-forward pipeline (:class:`WindowAddress`, or
:class:`FoldedWindowAddress` for folded ops). There is
no back-pressure: once started it issues one step every cycle until the op is done, which
is what keeps the array busy. Convolution windows are read straight from the activation
memory (no im2col copy); taps outside the input are flagged as padding.
"""
from types import SimpleNamespace

from amaranth import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.compiler.program import READ_WORDS, GemmOp
from hdl.compiler.widths import Widths, bits_for
from hdl.config import AcceleratorConfig
from hdl.gateware.engine_busy import registered_busy, registered_start
from hdl.gateware.loop_end import end_flag
from hdl.gateware.pipeline import delay_line, delayed
from hdl.gateware.shift_add import pipelined_shift_add_product, shift_add_product
from hdl.gateware.step import step_layout, step_stream
from hdl.gateware.taps_on_rows_steps import TapsOnRowsSteps, taps_on_rows_layout, taps_on_rows_params
from hdl.gateware.weight_memory import WEIGHT_BITS_SHAPE
from hdl.gateware.window import (FoldedWindowAddress, WindowAddress, divmod_by_constant, window_layout,
                                window_params)


def gemm_params_layout(w: Widths, config: AcceleratorConfig) -> data.StructLayout:
    """Per-op constants of a GEMM op."""
    coord, tile = unsigned(w.coord), unsigned(w.tile)
    return data.StructLayout({
        "window": window_layout(w),
        "folded": 1, "taps_w": coord,        # taps_w: kernel width, or tiles of a folded row
        "ct_count": tile, "k_tiles": tile, "nt_count": tile, "block": tile,
        "pixels": unsigned(w.pixel), "out_stride": unsigned(w.act_element), "out_channels": unsigned(w.act_element),
        "out_base": unsigned(w.act_addr),
        "w_base": unsigned(w.weight_addr), "w_bits": WEIGHT_BITS_SHAPE, "p_base": unsigned(w.param_addr),
        "diagonal": 1,                       # channel tiles start at word nt of the pixel (GemmOp.diagonal)
        "out_nt_step": unsigned(w.act_element),   # elements from one output tile to the next
        "taps_on_rows": 1,                   # a taps-on-rows op: its steps come from TapsOnRowsSteps
        "taps": taps_on_rows_layout(w),
        "split": range(config.cols + 1),         # a split op's columns an output (GemmOp.split)
        "split_words": range(READ_WORDS + 1),    # its words a step; 0: not split
        "out_per_tile": range(config.cols + 1),  # outputs of a tile: cols / split
    })


def gemm_params(op: GemmOp, config: AcceleratorConfig) -> dict:
    """:func:`gemm_params_layout`'s values for ``op``. Output pixel ``p``'s channel tile
    ``nt`` starts at element ``p * out_stride + nt * out_nt_step`` of the destination
    (``out_stride``: its words times the bank width, or its channels when packed;
    ``out_nt_step``: the tile's outputs, ``cols / split``, or a whole word plane when the
    destination is planar); a packed destination's last tile writes only its channels.
    A split op's channel tiles are ``split_words`` words apart."""
    dest = op.dest
    out_stride = dest.pixel_stride * (1 if dest.packed_lanes else config.bank_width)
    per_tile = config.cols // op.split
    if dest.planar:                  # word nt * pixels + p
        out_stride, out_nt_step = config.bank_width, dest.pixels * config.bank_width
    else:
        out_nt_step = per_tile
    return {"window": window_params(op.source, op.dest, op.kernel, op.stride, op.padding),
            "folded": int(op.folded), "taps_w": op.row_tiles if op.folded else op.kernel[1],
            "ct_count": 1 if op.folded else op.channel_tiles, "k_tiles": op.k_tiles, "nt_count": op.n_tiles,
            "block": op.block, "pixels": op.pixels,
            "out_stride": out_stride,
            "out_channels": dest.channels if dest.packed_lanes else op.n_tiles * per_tile,
            "out_base": op.dest.base, "w_base": op.weight_base, "w_bits": op.weight_bits, "p_base": op.param_base,
            "diagonal": int(op.diagonal), "out_nt_step": out_nt_step,
            "taps_on_rows": int(bool(op.tap_tiles)), "taps": taps_on_rows_params(op, config),
            "split": op.split, "split_words": op.split_words(config),
            "out_per_tile": per_tile}


class StepGenerator(wiring.Component):
    """Issues the steps of one GEMM op.

    Parameters
    ----------
    widths: the program's :class:`Widths`.
    config: the array's configuration.
    folding: whether any op is folded (adds a :class:`FoldedWindowAddress`).
    taps_on_rows: whether any op runs taps-on-rows (adds a :class:`TapsOnRowsSteps`, which
    issues that op's steps).

    Members
    -------
    params: In, the op's constants, held stable while ``busy``.
    start: In, a one-cycle pulse that starts the op (ignored while busy).
    busy: Out, a register (:func:`~hdl.gateware.engine_busy.registered_busy`): high from the
    cycle after ``start`` to the cycle after the last step has left ``steps``.
    steps: Out stream, registered.
    """

    def __init__(self, widths: Widths, config: AcceleratorConfig, folding: bool = False, taps_on_rows: bool = False):
        self._w, self._cfg, self._folding, self._taps_on_rows = widths, config, folding, taps_on_rows
        self._in_groups = config.bank_width // config.rows
        super().__init__({
            "params": In(gemm_params_layout(widths, config)),
            "start": In(1),
            "busy": Out(1),
            "steps": Out(step_stream(widths, config)),
        })

    @staticmethod
    def _word_and_group(m, group, word, groups: int, advance, reset, split_words):
        """A channel-tile index split into (word of the pixel, group of lanes in the word);
        a split op's tiles are ``split_words`` whole words each."""
        with m.If(reset):
            m.d.sync += [group.eq(0), word.eq(0)]
        with m.Elif(advance & split_words.any()):
            m.d.sync += word.eq(word + split_words)
        with m.Elif(advance & (group == groups - 1)):
            m.d.sync += [group.eq(0), word.eq(word + 1)]
        with m.Elif(advance):
            m.d.sync += group.eq(group + 1)

    def _loop_nest(self, m) -> SimpleNamespace:
        """The loop counters: one state of the nest a cycle while running."""
        w, p = self._w, self.params
        g = p.window
        running = Signal()
        nt, kt, ct = (Signal(w.tile, name=n) for n in ("nt", "kt", "ct"))
        i, j = Signal(w.coord), Signal(w.coord)
        ct_word, ct_group = Signal(w.coord), Signal(bits_for(self._in_groups - 1))
        nt_first = Signal(w.act_element)                   # nt * cols: the tile's first channel
        nt_out = Signal(w.act_element)                     # nt * out_nt_step: the tile's first output element
        m0, cnt = Signal(w.pixel), Signal(w.tile)          # block's first pixel; pixel in block
        w_nt_base = Signal(w.weight_addr)
        # Raster position of the current pixel, and of the block's first one.
        oy0, ox0, oy, ox = (Signal(w.coord, name=n) for n in ("oy0", "ox0", "oy", "ox"))
        ibase0, ibase = Signal(w.pixel, name="ibase0"), Signal(w.pixel, name="ibase")

        # The block's length, and the pixels left after it, are registers set when a block
        # begins, with every comparison the next block needs made then (see below).
        block_len, left_after = Signal(w.tile), Signal(w.pixel)

        # Each loop's end is a register, computed for the counter's next value (see
        # :func:`hdl.gateware.loop_end.end_flag`): compared in the counters' own cycle, the ends, their carries
        # and the counters' resets were seven levels of logic in series.
        # The loops' last indices minus one, registered (the parameters hold still while an
        # op runs: they are first compared a cycle after it starts), and whether a loop has
        # one index, registered too: the parameters are valid from the cycle of ``start``,
        # and the loops begin a cycle later, with ``started``.
        ct_before, j_before, i_before, nt_last = (
            Signal(w.tile, name="ct_before"), Signal(w.coord, name="j_before"),
            Signal(w.coord, name="i_before"), Signal(w.tile, name="nt_last"))
        m.d.sync += [ct_before.eq(p.ct_count - 2), j_before.eq(p.taps_w - 2), i_before.eq(g.kh - 2),
                     nt_last.eq(p.nt_count - 1)]
        ct_single, j_single, i_single = (delayed(m, value, 1, name) for value, name in (
            (p.ct_count == 1, "ct_single"), (p.taps_w == 1, "j_single"), (g.kh == 1, "i_single")))
        block_before, block_single, last_block, short_after = Signal(w.tile), Signal(), Signal(), Signal()
        end_of_block, end_of_ct, end_of_j, end_of_i = (Signal(name=n) for n in (
            "end_of_block", "end_of_ct", "end_of_j", "end_of_i"))
        end_of_k = end_of_ct & end_of_j & end_of_i
        end_of_m = last_block
        # Carries: each level advances when every level inside it wraps.
        # The start, registered here (ignored until the last step has left): from the
        # sequencer across the chip, it went on through the loops' ends into their
        # counters in its own cycle, the default design's critical path at 102.5 MHz. The
        # op's first step leaves a cycle later for it.
        started = registered_start(m, self.start, self.busy)
        start = started & ~p.taps_on_rows
        # Each carry, and each counter's reset and advance below, is written as the fewest
        # flags that decide it (an advance is looked at only when its reset is low), so
        # that each is two levels of logic: with the carries written in series, the path
        # from ``running`` to the channel tile's reset was five, the step generator's
        # critical path alone (119 MHz).
        at_end = Signal(name="at_block_end")
        m.d.comb += at_end.eq(running & end_of_block)
        next_pixel = running & ~end_of_block
        next_tap = at_end & ~end_of_k                          # same block, next kt
        next_block = at_end & end_of_k & ~end_of_m
        next_tile = at_end & end_of_k & end_of_m

        # A block begins: its length (``p.block``, or the pixels left if fewer), its last
        # index minus one and whether it is 0 (one pixel: its end's flag from the start),
        # whether it is the op's last, the pixels after it and whether they are fewer than
        # ``p.block``. Both candidates, the op's first block and the one after this, are
        # computed from registers and parameters alone; the carries only choose. The
        # first's are registers, taken from the parameters in the cycle of ``start``.
        def block_from(left, shorter):
            return {"len": Mux(shorter, left, p.block), "before": Mux(shorter, left - 2, p.block - 2),
                    "single": Mux(shorter, left == 1, p.block == 1), "last": left <= p.block,
                    "after": left - p.block, "short_after": left < (p.block << 1)}
        later = block_from(left_after, short_after)
        first = {key: delayed(m, value, 1, f"first_{key}")
                 for key, value in block_from(p.pixels, p.pixels < p.block).items()}
        begin, fresh = start | next_tile | next_block, start | next_tile
        with m.If(begin):
            m.d.sync += [register.eq(Mux(fresh, first[key], later[key])) for key, register in (
                ("len", block_len), ("before", block_before), ("single", block_single), ("last", last_block),
                ("after", left_after), ("short_after", short_after))]
        with m.If(start | ~next_pixel):
            m.d.sync += end_of_block.eq(Mux(begin, Mux(fresh, first["single"], later["single"]), block_single))
        with m.Else():
            m.d.sync += end_of_block.eq(cnt == block_before)

        # The reduction's counters ct, j, i: reset, advanced or held (as below).
        # (Each counter resets when the block ends and every loop inside it wraps, or at
        # the start; else advances when the block ends and the loops inside it wrap.)
        restart = start | (at_end & end_of_k)
        ct_reset, j_reset = start | (at_end & end_of_ct), start | (at_end & end_of_ct & end_of_j)
        end_flag(m, end_of_ct, ct, ct_before, ct_single, reset=ct_reset, advance=at_end)
        end_flag(m, end_of_j, j, j_before, j_single, reset=j_reset, advance=at_end & end_of_ct)
        end_flag(m, end_of_i, i, i_before, i_single, reset=restart, advance=at_end & end_of_ct & end_of_j)

        # Next raster position after (oy, ox), into the next image after the last row.
        next_oy, next_ox = Signal(w.coord), Signal(w.coord)
        next_ibase = Signal(w.pixel)
        m.d.comb += [next_oy.eq(oy), next_ox.eq(ox + 1), next_ibase.eq(ibase)]
        with m.If(ox == g.out_w - 1):
            m.d.comb += [next_oy.eq(oy + 1), next_ox.eq(0)]
            with m.If(oy == g.out_h - 1):
                m.d.comb += [next_oy.eq(0), next_ibase.eq(ibase + g.in_pixels)]

        with m.If(start):
            m.d.sync += [running.eq(1), w_nt_base.eq(p.w_base)]
        with m.If(next_tile & (nt == nt_last)):
            m.d.sync += running.eq(0)

        with m.If(start | ~next_pixel):
            m.d.sync += cnt.eq(0)
        with m.Else():
            m.d.sync += cnt.eq(cnt + 1)

        # The reduction: kt counts (i, j, ct) in that nesting.
        with m.If(restart):
            m.d.sync += [kt.eq(0), ct.eq(0), i.eq(0), j.eq(0)]
        with m.Elif(at_end):
            m.d.sync += kt.eq(kt + 1)
            with m.If(~end_of_ct):
                m.d.sync += ct.eq(ct + 1)
            with m.Elif(~end_of_j):
                m.d.sync += [ct.eq(0), j.eq(j + 1)]
            with m.Else():
                m.d.sync += [ct.eq(0), j.eq(0), i.eq(i + 1)]
        self._word_and_group(m, ct_group, ct_word, self._in_groups, advance=at_end & ~end_of_ct,
                             reset=ct_reset, split_words=p.split_words)

        # Pixels: the raster walk, restarted at the block's first pixel for every kt.
        with m.If(start | next_tile):
            m.d.sync += [m0.eq(0), oy0.eq(0), ox0.eq(0), oy.eq(0), ox.eq(0), ibase0.eq(0), ibase.eq(0)]
        with m.Elif(next_pixel):
            m.d.sync += [oy.eq(next_oy), ox.eq(next_ox), ibase.eq(next_ibase)]
        with m.Elif(next_tap):
            m.d.sync += [oy.eq(oy0), ox.eq(ox0), ibase.eq(ibase0)]
        with m.Elif(next_block):
            m.d.sync += [m0.eq(m0 + block_len), oy0.eq(next_oy), ox0.eq(next_ox), oy.eq(next_oy),
                         ox.eq(next_ox), ibase0.eq(next_ibase), ibase.eq(next_ibase)]

        # Output-channel tiles.
        with m.If(start):
            m.d.sync += nt.eq(0)
        with m.Elif(next_tile):
            m.d.sync += [nt.eq(nt + 1), w_nt_base.eq(w_nt_base + p.k_tiles)]
        with m.If(start):
            m.d.sync += [nt_first.eq(0), nt_out.eq(0)]
        with m.Elif(next_tile):
            m.d.sync += [nt_first.eq(nt_first + p.out_per_tile), nt_out.eq(nt_out + p.out_nt_step)]

        return SimpleNamespace(running=running, started=started, start=start, nt=nt, kt=kt, i=i, j=j, ct_word=ct_word, ct_group=ct_group,
                               nt_first=nt_first, nt_out=nt_out, pixel=m0 + cnt, cnt=cnt,
                               w_nt_base=w_nt_base, oy=oy, ox=ox, ibase=ibase, end_of_k=end_of_k)

    def elaborate(self, platform):
        m = Module()
        w, p = self._w, self.params
        n = self._loop_nest(m)

        # Stage 0: the step's counters, registered -------------------------------------
        layout = step_layout(w, self._cfg)
        rows = self._cfg.rows
        s0, s0_valid = Signal(layout), Signal()
        s0_pixel, s0_nt_out = Signal(w.pixel), Signal(w.act_element)
        s0_count = Signal(range(self._cfg.cols + 1))
        m.submodules.window = window = WindowAddress(w)
        m.d.sync += [
            s0_valid.eq(n.running),
            s0.lane.eq(shift_add_product(n.ct_group, rows, len(s0.lane))), s0.row_lo.eq(0), s0.row_hi.eq(rows),
            s0.w_addr.eq(n.w_nt_base + n.kt), s0.w_bits.eq(p.w_bits),
            s0.first.eq(n.kt == 0), s0.last.eq(n.end_of_k), s0.acc_addr.eq(n.cnt),
            s0.p_addr.eq(p.p_base + n.nt), s0.split.eq(p.split),
            window.tap.oy.eq(n.oy), window.tap.ox.eq(n.ox), window.tap.i.eq(n.i), window.tap.j.eq(n.j),
            window.tap.image_base.eq(n.ibase),
            window.tap.word.eq(n.ct_word + Mux(p.diagonal, n.nt, 0)),
            s0_pixel.eq(n.pixel), s0_nt_out.eq(n.nt_out),
        ]
        # The tile's channels that exist: all its outputs (cols / split), but in a packed
        # destination's last tile.
        left = Signal(w.act_element)
        m.d.comb += left.eq(p.out_channels - n.nt_first)
        m.d.sync += s0_count.eq(Mux(left < p.out_per_tile, left, p.out_per_tile))
        m.d.comb += window.window.eq(p.window)

        # Stages 1 to WindowAddress.LATENCY: the input address (window pipeline), and the
        # output's: element pixel * out_stride (stages 1, 2: a product of two registers in
        # one stage was the step generator's critical path) + nt * cols of the destination
        # (3), its word and lane (4), the word from the base (5).
        out_offset = pipelined_shift_add_product(m, s0_pixel, p.out_stride, w.act_element, stages=2,
                                                 name="out_offset")
        out_element = Signal(w.act_element)
        out_word, out_lane, out_addr = Signal(w.act_addr), Signal(range(self._cfg.bank_width)), Signal(w.act_addr)
        m.d.sync += out_element.eq(out_offset + delayed(m, s0_nt_out, 2, "nt_out"))
        word, lane = divmod_by_constant(m, out_element, self._cfg.bank_width)
        m.d.sync += [out_word.eq(word), out_lane.eq(lane), out_addr.eq(p.out_base + out_word)]
        valid = delay_line(m, s0_valid, WindowAddress.LATENCY, "valid")
        m.d.comb += [
            self.steps.valid.eq(valid[-1]),
            self.steps.payload.eq(delayed(m, s0, WindowAddress.LATENCY, "s")),
            self.steps.payload.act_addr.eq(window.addr),
            self.steps.payload.pad.eq(window.pad),
            self.steps.payload.out_addr.eq(delayed(m, out_addr, WindowAddress.LATENCY - 5, "out_addr")),
            self.steps.payload.out_lane.eq(delayed(m, out_lane, WindowAddress.LATENCY - 4, "out_lane")),
            self.steps.payload.out_count.eq(delayed(m, s0_count, WindowAddress.LATENCY, "out_count")),
        ]
        if self._folding:
            m.submodules.folded_window = folded = FoldedWindowAddress(w, rows, self._cfg.bank_width)
            m.d.comb += [folded.window.eq(p.window), folded.tap.eq(window.tap)]
            with m.If(p.folded):
                m.d.comb += [self.steps.payload.act_addr.eq(folded.addr), self.steps.payload.lane.eq(folded.lane),
                             self.steps.payload.row_lo.eq(folded.row_lo), self.steps.payload.row_hi.eq(folded.row_hi),
                             self.steps.payload.pad.eq(folded.pad)]
        busy = registered_busy(m, n.started | n.running | Cat(*valid).any(), self.start)
        if self._taps_on_rows:
            m.submodules.taps_on_rows = taps = TapsOnRowsSteps(w, self._cfg, gemm_params_layout(w, self._cfg))
            m.d.comb += [taps.params.eq(p), taps.start.eq(self.start & p.taps_on_rows)]
            with m.If(p.taps_on_rows):
                m.d.comb += [self.steps.valid.eq(taps.steps.valid), self.steps.payload.eq(taps.steps.payload)]
            busy |= taps.busy                   # both registers
        m.d.comb += self.busy.eq(busy)
        return m
