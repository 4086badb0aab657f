"""Top level ``neural_network_accelerator``: input loader, op sequencer, engines, output.

Ports (plain names, the same in Verilog and VHDL)
-------------------------------------------------
clk, reset            clock; synchronous active-high reset
input_data[1023:0]    one beat of the input: ``words_per_beat`` activation words (see
                      :mod:`hdl.host`); ``input_valid`` / ``input_ready`` handshake
output_values[1023:0] one beat of the output tensor, same packing;
                      ``output_valid`` / ``output_ready`` handshake, ``output_last`` on
                      the final beat of an inference
output_data[9:0]      one-hot of the predicted class (argmax of the logits, lowest index
                      on ties), valid with ``output_valid``; zero for models whose output
                      is not a vector of at most 10 logits
perf_cycles[31:0]     cycles of the last finished inference, first input beat to last
                      output beat
perf_busy[31:0]       steps the array issued during it (each step = rows x cols MAC slots)
perf_select           picks a phase of the last inference: op ``k`` of the program for
                      ``k < ops``, input load for ``ops``, output for ``ops + 1``
perf_phase_cycles[31:0], perf_phase_busy[31:0]
                      cycles and array steps of the selected phase (combinational)

Flow: the loader writes the input beats into the activation memory; each op of the
program runs to completion (its last write landed) before the next starts; then the
output unit streams the result. One inference at a time.
"""
from amaranth import ClockDomain, ClockSignal, Module, Mux, ResetSignal, Signal, signed, unsigned
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from hdl.config import OUTPUT_CLASSES
from hdl.gateware.gemm_engine import GemmEngine
from hdl.gateware.perf_counters import PerfCounters
from hdl.gateware.pool_engine import PoolEngine, pool_params_layout
from hdl.compiler.program import GemmOp, PoolOp, Program
from hdl.gateware.step_generator import StepGenerator, gemm_params_layout
from hdl.compiler.widths import Widths, bits_for

PERF_BITS = 32


def _gemm_params(op: GemmOp, cfg) -> dict:
    return {"in_base": op.source.base, "in_h": op.source.height, "in_w": op.source.width,
            "in_cw": op.source.words_per_pixel, "kh": op.kernel[0], "kw": op.kernel[1],
            "sh": op.stride[0], "sw": op.stride[1], "ph": op.padding[0], "pw": op.padding[1],
            "ct_count": op.channel_tiles, "k_tiles": op.k_tiles, "nt_count": op.n_tiles,
            "block": op.block, "pixels": op.pixels, "in_pixels": op.source.height * op.source.width,
            "out_h": op.dest.height, "out_w": op.dest.width,
            "out_cw": op.dest.words_per_pixel, "out_base": op.dest.base,
            "w_base": op.weight_base, "p_base": op.param_base}


def _pool_params(op: PoolOp) -> dict:
    return {"in_base": op.source.base, "in_h": op.source.height, "in_w": op.source.width,
            "cw": op.source.words_per_pixel, "kh": op.kernel[0], "kw": op.kernel[1],
            "sh": op.stride[0], "sw": op.stride[1], "ph": op.padding[0], "pw": op.padding[1],
            "out_h": op.dest.height, "out_w": op.dest.width, "out_base": op.dest.base,
            "in_pixels": op.source.height * op.source.width, "pixels": op.dest.pixels}


class NeuralNetworkAccelerator(wiring.Component):
    """The accelerator generated for one compiled :class:`Program`."""

    def __init__(self, program: Program):
        cfg = program.config
        self._program, self._cfg = program, cfg
        self._widths = Widths.of(program)
        bus = cfg.input_bus_bits
        super().__init__({
            "clk": In(1), "reset": In(1),
            "input_data": In(bus), "input_valid": In(1), "input_ready": Out(1),
            "output_data": Out(OUTPUT_CLASSES), "output_values": Out(bus),
            "output_valid": Out(1), "output_ready": In(1), "output_last": Out(1),
            "perf_cycles": Out(PERF_BITS), "perf_busy": Out(PERF_BITS),
            "perf_select": In(range(max(2, len(program.ops) + 2))),
            "perf_phase_cycles": Out(PERF_BITS), "perf_phase_busy": Out(PERF_BITS),
        })

    @property
    def program(self) -> Program:
        return self._program

    def elaborate(self, platform):
        m = Module()
        prog, cfg, w = self._program, self._cfg, self._widths
        bank = cfg.bank_width
        wpb = prog.words_per_beat
        word_bits = 8 * bank

        m.domains.sync = ClockDomain("sync")
        m.d.comb += [ClockSignal("sync").eq(self.clk), ResetSignal("sync").eq(self.reset)]

        act = memory.Memory(shape=unsigned(word_bits), depth=prog.activation_words, init=[])
        m.submodules.activations = act
        act_wr = act.write_port(granularity=8)
        act_rd = act.read_port()
        act_rdata = Signal(data.ArrayLayout(signed(8), bank))
        m.d.comb += act_rdata.eq(act_rd.data)

        m.submodules.steps = steps = StepGenerator(w, bank // cfg.rows, bank // cfg.cols)
        m.submodules.gemm = gemm = GemmEngine(prog, w)
        m.submodules.pool = pool = PoolEngine(w, bank)
        m.d.comb += [gemm.step.eq(steps.step), gemm.act_rdata.eq(act_rdata),
                     pool.act_rdata.eq(act_rdata)]

        # Per-op constants, selected by the op counter.
        op_index = Signal(range(max(2, len(prog.ops))))
        gemm_layout, pool_layout = gemm_params_layout(w), pool_params_layout(w)
        with m.Switch(op_index):
            for index, op in enumerate(prog.ops):
                with m.Case(index):
                    if isinstance(op, GemmOp):
                        m.d.comb += [steps.params.eq(gemm_layout.const(_gemm_params(op, cfg))),
                                     gemm.zero_point.eq(op.input_zero_point)]
                    else:
                        m.d.comb += pool.params.eq(pool_layout.const(_pool_params(op)))
        is_pool = Signal()
        m.d.comb += is_pool.eq(0)
        with m.Switch(op_index):
            for index, op in enumerate(prog.ops):
                if isinstance(op, PoolOp):
                    with m.Case(index):
                        m.d.comb += is_pool.eq(1)

        # Input loader state.
        beat = Signal(self.input_data.shape())
        beat_words_left = Signal(range(wpb + 1))
        in_addr = Signal(w.act_addr, init=prog.input.base)
        in_words_left = Signal(bits_for(prog.input.words) + 1, init=prog.input.words)
        # Output unit state.
        out_words = prog.output.words
        out_read_addr = Signal(w.act_addr)
        out_words_left = Signal(bits_for(out_words) + 1)
        out_slot = Signal(range(wpb + 1))
        out_beat = Signal(self.output_values.shape())
        out_lane_base = Signal(bits_for(out_words * bank) + 1)
        best_value = Signal(signed(8))
        scan_word = Signal(data.ArrayLayout(signed(8), bank))
        scan_base = Signal.like(out_lane_base)
        scan_lane = Signal(range(bank + 1))
        best_index = Signal(range(OUTPUT_CLASSES + 1))
        classes = prog.output_shape[0] if prog.is_classifier else 0

        drain = Signal(range(gemm.write_latency + 2))
        cycles = Signal(PERF_BITS)
        busy = Signal(PERF_BITS)
        counting = Signal()
        n_ops = len(prog.ops)
        m.submodules.perf = perf = PerfCounters(n_ops + 2, PERF_BITS)
        m.d.comb += [perf.enable.eq(counting), perf.busy.eq(steps.step.valid), perf.slot.eq(op_index),
                     perf.select.eq(self.perf_select), self.perf_phase_cycles.eq(perf.cycles),
                     self.perf_phase_busy.eq(perf.busy_cycles)]
        with m.If(counting):
            m.d.sync += cycles.eq(cycles + 1)
            with m.If(steps.step.valid):
                m.d.sync += busy.eq(busy + 1)

        read_from = Signal(2)     # 0: gemm, 1: pool, 2: output unit
        with m.Switch(read_from):
            with m.Case(0):
                m.d.comb += act_rd.addr.eq(gemm.act_raddr)
            with m.Case(1):
                m.d.comb += act_rd.addr.eq(pool.act_raddr)
            with m.Default():
                m.d.comb += act_rd.addr.eq(out_read_addr)

        loader_wr_en = Signal()
        with m.If(loader_wr_en):
            m.d.comb += [act_wr.en.eq(~0), act_wr.addr.eq(in_addr), act_wr.data.eq(beat[:word_bits])]
        with m.Elif(gemm.wr_en):
            m.d.comb += [act_wr.en.eq(gemm.wr_lanes), act_wr.addr.eq(gemm.wr_addr), act_wr.data.eq(gemm.wr_data)]
        with m.Elif(pool.wr_en):
            m.d.comb += [act_wr.en.eq(~0), act_wr.addr.eq(pool.wr_addr), act_wr.data.eq(pool.wr_data)]

        with m.FSM(name="sequencer"):
            with m.State("LOAD"):
                m.d.comb += perf.slot.eq(n_ops)
                m.d.comb += self.input_ready.eq(beat_words_left == 0)
                with m.If(self.input_valid & self.input_ready):
                    m.d.sync += [beat.eq(self.input_data), beat_words_left.eq(wpb), counting.eq(1)]
                    with m.If(in_words_left == prog.input.words):
                        m.d.sync += [cycles.eq(1), busy.eq(0)]
                        m.d.comb += [perf.clear.eq(1), perf.enable.eq(1)]
                with m.If(beat_words_left != 0):
                    m.d.comb += loader_wr_en.eq(1)
                    m.d.sync += [beat.eq(beat >> word_bits), beat_words_left.eq(beat_words_left - 1),
                                 in_addr.eq(in_addr + 1), in_words_left.eq(in_words_left - 1)]
                    with m.If(in_words_left == 1):
                        m.d.sync += [beat_words_left.eq(0), op_index.eq(0)]
                        m.next = "START"
            with m.State("START"):
                m.d.comb += [steps.start.eq(~is_pool), pool.start.eq(is_pool)]
                m.d.sync += read_from.eq(is_pool)
                m.next = "RUN"
            with m.State("RUN"):
                with m.If(~steps.busy & ~pool.busy & ~steps.start & ~pool.start):
                    # A GEMM op's last writes are still in the engine's pipeline; the
                    # pool engine's busy already covers its last write.
                    m.d.sync += drain.eq(Mux(is_pool, 0, gemm.write_latency))
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                m.d.sync += drain.eq(drain - 1)
                with m.If(drain == 0):
                    with m.If(op_index == len(prog.ops) - 1):
                        m.d.sync += [read_from.eq(2), out_read_addr.eq(prog.output.base),
                                     out_words_left.eq(out_words), out_slot.eq(0), out_beat.eq(0),
                                     out_lane_base.eq(0), best_value.eq(-128), best_index.eq(0)]
                        m.next = "OUT_ISSUE"
                    with m.Else():
                        m.d.sync += op_index.eq(op_index + 1)
                        m.next = "START"
            with m.State("OUT_ISSUE"):
                m.d.comb += perf.slot.eq(n_ops + 1)
                m.d.sync += [out_read_addr.eq(out_read_addr + 1), out_words_left.eq(out_words_left - 1)]
                m.next = "OUT_CAPTURE"
            with m.State("OUT_CAPTURE"):
                m.d.comb += perf.slot.eq(n_ops + 1)
                with m.Switch(out_slot):
                    for s in range(wpb):
                        with m.Case(s):
                            m.d.sync += out_beat[s * word_bits:(s + 1) * word_bits].eq(act_rd.data)
                m.d.sync += [out_slot.eq(out_slot + 1), out_lane_base.eq(out_lane_base + bank),
                             scan_word.eq(act_rdata), scan_base.eq(out_lane_base), scan_lane.eq(0)]
                with m.If(out_lane_base < classes):
                    m.next = "OUT_SCAN"
                with m.Elif((out_slot == wpb - 1) | (out_words_left == 0)):
                    m.next = "OUT_SEND"
                with m.Else():
                    m.next = "OUT_ISSUE"
            with m.State("OUT_SCAN"):
                # Argmax over the logits, one lane a cycle (the first index wins ties); a
                # classifier has at most 10 logits, so this costs at most ~10 cycles.
                m.d.comb += perf.slot.eq(n_ops + 1)
                lane_value = Signal(signed(8))
                with m.Switch(scan_lane):
                    for lane in range(bank):
                        with m.Case(lane):
                            m.d.comb += lane_value.eq(scan_word[lane])
                index = scan_base + scan_lane
                with m.If((index < classes) & (lane_value > best_value)):
                    m.d.sync += [best_value.eq(lane_value), best_index.eq(index)]
                m.d.sync += scan_lane.eq(scan_lane + 1)
                with m.If((scan_lane == bank - 1) | (index >= classes - 1)):
                    with m.If((out_slot == wpb) | (out_words_left == 0)):
                        m.next = "OUT_SEND"
                    with m.Else():
                        m.next = "OUT_ISSUE"
            with m.State("OUT_SEND"):
                m.d.comb += perf.slot.eq(n_ops + 1)
                last = out_words_left == 0
                m.d.comb += [self.output_valid.eq(1), self.output_values.eq(out_beat),
                             self.output_last.eq(last)]
                if classes:
                    m.d.comb += self.output_data.eq(1 << best_index)
                with m.If(self.output_ready):
                    m.d.sync += [out_slot.eq(0), out_beat.eq(0)]
                    with m.If(last):
                        # This cycle counts too (the counters' own update is too late).
                        m.d.sync += [counting.eq(0), self.perf_cycles.eq(cycles + 1), self.perf_busy.eq(busy),
                                     in_addr.eq(prog.input.base), in_words_left.eq(prog.input.words),
                                     read_from.eq(0)]
                        m.next = "LOAD"
                    with m.Else():
                        m.next = "OUT_ISSUE"

        return m
