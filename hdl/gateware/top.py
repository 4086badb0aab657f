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
                      on ties), on the inference's last output beat (``output_last``); zero
                      on earlier beats and for models whose output is not a vector of at
                      most 10 logits
perf_cycles[31:0]     cycles of the last finished inference, first input beat to last
                      output beat
perf_busy[31:0]       steps the array issued during it (each step = rows x cols MAC slots)
perf_select           picks a phase of the last inference: op ``k`` of the program for
                      ``k < ops``, input load for ``ops``, output for ``ops + 1``
perf_phase_cycles[31:0], perf_phase_busy[31:0]
                      cycles and array steps of the selected phase (combinational)

With ``runtime_weights`` (see :mod:`hdl.compiler.weight_image`):

weights_data[31:0]    one beat of a weight image; ``weights_valid`` / ``weights_ready``
                      handshake, ``weights_last`` on the image's last beat. Taken only
                      between inferences; the input waits while an image is loading
weights_done, weights_error
                      one-cycle pulses: an image loaded whole; one ended early or late

Flow: the loader writes the input beats into the activation memory; each op of the
program runs to completion (its last write landed) before the next starts; then the
output unit streams the result. One inference at a time.

This module only instantiates the components and connects them; each job is a component
of its own (input loader, sequencer, op table, engines, activation memory, output unit,
counters). The ports keep the flat names of the original entity.
"""
from amaranth import ClockDomain, ClockSignal, Module, ResetSignal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.compiler.program import PoolOp, Program
from hdl.compiler.widths import Widths
from hdl.config import OUTPUT_CLASSES
from hdl.gateware.activation_memory import BANKS, ActivationMemory
from hdl.gateware.gemm_engine import GemmEngine
from hdl.gateware.input_loader import InputLoader
from hdl.gateware.op_table import OpTable
from hdl.gateware.output_unit import OutputUnit
from hdl.gateware.perf_counters import PerfCounters
from hdl.gateware.pool_engine import PoolEngine
from hdl.gateware.sequencer import Sequencer
from hdl.gateware.step_generator import StepGenerator
from hdl.gateware.weight_loader import WeightLoader
from hdl.compiler.weight_image import BEAT_BITS, ImageLayout

PERF_BITS = 32


class NeuralNetworkAccelerator(wiring.Component):
    """The accelerator generated for one compiled :class:`Program`."""

    def __init__(self, program: Program):
        cfg = program.config
        self._program, self._cfg = program, cfg
        self._widths = Widths.of(program)
        bus = cfg.input_bus_bits
        members = {
            "clk": In(1), "reset": In(1),
            "input_data": In(bus), "input_valid": In(1), "input_ready": Out(1),
            "output_data": Out(OUTPUT_CLASSES), "output_values": Out(bus),
            "output_valid": Out(1), "output_ready": In(1), "output_last": Out(1),
            "perf_cycles": Out(PERF_BITS), "perf_busy": Out(PERF_BITS),
            "perf_select": In(range(max(2, len(program.ops) + 2))),
            "perf_phase_cycles": Out(PERF_BITS), "perf_phase_busy": Out(PERF_BITS),
        }
        if cfg.runtime_weights:
            members.update({"weights_data": In(BEAT_BITS), "weights_valid": In(1), "weights_ready": Out(1),
                            "weights_last": In(1), "weights_done": Out(1), "weights_error": Out(1)})
        super().__init__(members)

    @property
    def program(self) -> Program:
        return self._program

    def units(self) -> dict:
        """The design's components, new instances, by submodule name (what ``elaborate``
        connects; :mod:`hdl.tools.unit_estimate` places each alone)."""
        prog, cfg, w = self._program, self._cfg, self._widths
        lanes, bits = cfg.bank_width, cfg.data_bits
        load_words = min(BANKS, prog.words_per_beat)
        pool_ops = [op for op in prog.ops if isinstance(op, PoolOp)]
        pool_words = max([1] + [op.read_words for op in pool_ops])
        gemm = GemmEngine(prog, w)
        return {
            "pool": PoolEngine.for_ops(w, lanes, bits, pool_ops),
            "activations": ActivationMemory(prog.activation_words, w.act_addr, lanes, bits, load_words, pool_words,
                                            GemmEngine.write_words_for(prog), GemmEngine.read_words_for(prog)),
            "loader": InputLoader(prog.input, prog.words_per_beat, cfg.input_bus_bits, w.act_addr, lanes, bits,
                                  load_words),
            "ops": OpTable(prog, w),
            "steps": StepGenerator(w, cfg, folding=any(op.folded for op in prog.gemm_ops),
                                   taps_on_rows=any(op.tap_tiles for op in prog.gemm_ops)),
            "gemm": gemm,
            "output": OutputUnit(prog, w),
            "sequencer": Sequencer([isinstance(op, PoolOp) for op in prog.ops], gemm.write_latency),
            "perf": PerfCounters(len(prog.ops) + 2, PERF_BITS),
        }

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg

        m.domains.sync = ClockDomain("sync")
        m.d.comb += [ClockSignal("sync").eq(self.clk), ResetSignal("sync").eq(self.reset)]

        units = self.units()
        for name, unit in units.items():
            m.submodules[name] = unit
        pool, act, loader, ops, steps, gemm, output, seq, perf = (units[name] for name in (
            "pool", "activations", "loader", "ops", "steps", "gemm", "output", "sequencer", "perf"))

        # Data: streams and memory ports.
        wiring.connect(m, steps.steps, gemm.steps)
        wiring.connect(m, loader.write, act.load)
        wiring.connect(m, gemm.write, act.gemm_write)
        wiring.connect(m, pool.write, act.pool_write)
        wiring.connect(m, gemm.read, act.gemm_read)
        wiring.connect(m, pool.read, act.pool_read)
        wiring.connect(m, output.read, act.output_read)

        # Control: the sequencer, the op table and the engines.
        m.d.comb += [
            ops.op_index.eq(seq.op_index),
            steps.params.eq(ops.gemm), gemm.zero_point.eq(ops.zero_point), pool.params.eq(ops.pool),
            steps.start.eq(seq.gemm_start), pool.start.eq(seq.pool_start),
            seq.engine_busy.eq(steps.busy | pool.busy),
            seq.loaded.eq(loader.done), loader.rearm.eq(seq.rearm),
            act.reader.eq(seq.reader),
            output.start.eq(seq.output_start), seq.output_done.eq(output.done),
            perf.start.eq(loader.first_beat), perf.stop.eq(output.done),
            perf.busy.eq(steps.steps.valid & ~steps.steps.payload.push_only), perf.slot.eq(seq.phase),
        ]

        input_ready = loader.beats.ready
        if cfg.runtime_weights:
            input_ready = self._weight_loader(m, loader, gemm, ops)

        # The entity's flat ports.
        m.d.comb += [
            loader.beats.payload.eq(self.input_data), loader.beats.valid.eq(self.input_valid & input_ready),
            self.input_ready.eq(input_ready),
            self.output_values.eq(output.beats.payload.values), self.output_data.eq(output.beats.payload.classes),
            self.output_last.eq(output.beats.payload.last), self.output_valid.eq(output.beats.valid),
            output.beats.ready.eq(self.output_ready),
            self.perf_cycles.eq(perf.last_cycles), self.perf_busy.eq(perf.last_busy),
            perf.select.eq(self.perf_select),
            self.perf_phase_cycles.eq(perf.cycles), self.perf_phase_busy.eq(perf.busy_cycles),
        ]
        return m

    def _weight_loader(self, m, loader, gemm, ops):
        """The run-time weight port; returns the input's gated ready: an image loads only
        between inferences, and the input waits while one loads (or is offered)."""
        m.submodules.weight_loader = weights = WeightLoader(ImageLayout.of(self._program))
        wiring.connect(m, weights.load_weights, gemm.load_weights)
        wiring.connect(m, weights.load_biases, gemm.load_biases)
        wiring.connect(m, weights.load_requant, gemm.load_requant)
        wiring.connect(m, weights.load_zero_points, ops.load_zero_points)
        m.d.comb += [
            weights.enable.eq(loader.idle),
            weights.beats.payload.data.eq(self.weights_data), weights.beats.payload.last.eq(self.weights_last),
            weights.beats.valid.eq(self.weights_valid), self.weights_ready.eq(weights.beats.ready),
            self.weights_done.eq(weights.done), self.weights_error.eq(weights.error),
        ]
        return loader.beats.ready & ~weights.busy & ~(loader.idle & self.weights_valid)
