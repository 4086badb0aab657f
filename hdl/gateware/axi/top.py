"""``neural_network_accelerator_axi``: the accelerator with AXI4-Stream data, AXI4-Lite
registers and an interrupt, for Vivado block designs, LiteX and Zynq/PYNQ systems.

Ports
-----
aclk, aresetn          clock; synchronous active-low reset (AXI convention)
s_axis_*               input frames: TDATA (``input_tdata_bits``), TVALID, TREADY, TLAST
m_axis_*               output frames: TDATA (``output_tdata_bits``), TVALID, TREADY, TLAST
s_axi_*                AXI4-Lite slave: the registers of :mod:`hdl.gateware.axi.registers`
irq                    high while ``CONTROL.irq_enable`` and any ``IRQ`` bit is set

The core (:class:`~hdl.gateware.top.NeuralNetworkAccelerator`) is unchanged inside; the
wrapper frames its beats (:mod:`~hdl.gateware.axi.input_framer`,
:mod:`~hdl.gateware.axi.output_framer`) and maps its counters to registers.
``CONTROL.soft_reset`` resets the core and the framers, not the registers.
"""
from __future__ import annotations

from amaranth import ClockDomain, ClockSignal, DomainRenamer, Module, ResetInserter, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.compiler.program import Program
from hdl.compiler.weight_image import BEAT_BITS
from hdl.gateware.axi import registers as regs
from hdl.gateware.axi.frame_shape import FrameShape
from hdl.gateware.axi.input_framer import InputFramer, axis_signature
from hdl.gateware.axi.output_framer import OutputFramer
from hdl.gateware.axi.register_file import RegisterFile, axi_lite_signature
from hdl.gateware.top import NeuralNetworkAccelerator

TOP_NAME = "neural_network_accelerator_axi"


def frame_shapes(program: Program, input_tdata_bits: int, output_tdata_bits: int) -> tuple[FrameShape, FrameShape]:
    """The input and output frames of ``program`` at these TDATA widths."""
    cfg = program.config
    bank_bytes = cfg.bank_width * cfg.data_bits // 8
    return (FrameShape.of(program.input.words, program.words_per_beat, bank_bytes, cfg.input_bus_bits,
                          input_tdata_bits),
            FrameShape.of(program.output.words, program.words_per_beat, bank_bytes, cfg.input_bus_bits,
                          output_tdata_bits))


def _lsb(register: str, field: str) -> int:
    return next(f.lsb for f in regs.BY_NAME[register].fields if f.name == field)


def _fields(register: str, **values) -> int:
    """A register's value from field values (for constants)."""
    fields = {f.name: f for f in regs.BY_NAME[register].fields}
    return sum(value << fields[name].lsb for name, value in values.items())


class NeuralNetworkAcceleratorAxi(wiring.Component):
    """The AXI wrapper of the accelerator for one compiled :class:`Program`."""

    def __init__(self, program: Program, input_tdata_bits: int = 32, output_tdata_bits: int | None = None):
        if not isinstance(program, Program):
            raise TypeError(f"program must be a Program, not {program!r}")
        output_tdata_bits = input_tdata_bits if output_tdata_bits is None else output_tdata_bits
        self._program = program
        self._input_shape, self._output_shape = frame_shapes(program, input_tdata_bits, output_tdata_bits)
        super().__init__({
            "aclk": In(1), "aresetn": In(1),
            **axis_signature("s_axis", input_tdata_bits, slave=True),
            **axis_signature("m_axis", output_tdata_bits, slave=False),
            **axi_lite_signature(),
            "irq": Out(1),       # not "interrupt": a C++ word that Verilator lint warns of
            **(axis_signature("s_axis_weights", BEAT_BITS, slave=True) if program.config.runtime_weights else {}),
        })

    @property
    def program(self) -> Program:
        return self._program

    @property
    def input_frame(self) -> FrameShape:
        return self._input_shape

    @property
    def output_frame(self) -> FrameShape:
        return self._output_shape

    def elaborate(self, platform):
        m = Module()
        prog = self._program
        # The core makes its own "sync" domain from its clk and reset ports; the wrapper's
        # logic runs in "axi", on the same clock.
        m.domains.axi = ClockDomain("axi")
        m.d.comb += [ClockSignal("axi").eq(self.aclk), ResetSignal("axi").eq(~self.aresetn)]
        axi = DomainRenamer("axi")

        m.submodules.registers = registers = axi(RegisterFile(regs.REGISTERS))
        soft_reset = registers.pulse_CONTROL[_lsb("CONTROL", "soft_reset")]
        m.submodules.core = core = NeuralNetworkAccelerator(prog)
        m.submodules.input_framer = framer_in = axi(ResetInserter(soft_reset)(InputFramer(self._input_shape)))
        m.submodules.output_framer = framer_out = axi(ResetInserter(soft_reset)(OutputFramer(self._output_shape)))
        m.d.comb += [core.clk.eq(self.aclk), core.reset.eq(~self.aresetn | soft_reset)]

        # AXI4-Lite.
        for name in axi_lite_signature():
            if name in ("s_axi_awready", "s_axi_wready", "s_axi_bresp", "s_axi_bvalid", "s_axi_arready",
                        "s_axi_rdata", "s_axi_rresp", "s_axi_rvalid"):
                m.d.comb += getattr(self, name).eq(getattr(registers, name))
            else:
                m.d.comb += getattr(registers, name).eq(getattr(self, name))

        # Streams: the ports, the framers and the core.
        for suffix in ("tdata", "tvalid", "tlast"):
            m.d.comb += [getattr(framer_in, f"s_axis_{suffix}").eq(getattr(self, f"s_axis_{suffix}")),
                         getattr(self, f"m_axis_{suffix}").eq(getattr(framer_out, f"m_axis_{suffix}"))]
        m.d.comb += [self.s_axis_tready.eq(framer_in.s_axis_tready),
                     framer_out.m_axis_tready.eq(self.m_axis_tready)]
        m.d.comb += [core.input_data.eq(framer_in.beats.payload), core.input_valid.eq(framer_in.beats.valid),
                     framer_in.beats.ready.eq(core.input_ready),
                     framer_out.beats.payload.values.eq(core.output_values),
                     framer_out.beats.payload.classes.eq(core.output_data),
                     framer_out.beats.payload.last.eq(core.output_last),
                     framer_out.beats.valid.eq(core.output_valid), core.output_ready.eq(framer_out.beats.ready),
                     framer_out.drop.eq(framer_in.errored)]

        runtime = prog.config.runtime_weights
        if runtime:
            m.d.comb += [core.weights_data.eq(self.s_axis_weights_tdata), core.weights_last.eq(self.s_axis_weights_tlast),
                         core.weights_valid.eq(self.s_axis_weights_tvalid),
                         self.s_axis_weights_tready.eq(core.weights_ready)]
        weights_done, weights_error = (core.weights_done, core.weights_error) if runtime else (0, 0)
        weight_loads = Signal(32)
        with m.If(weights_done):
            m.d.axi += weight_loads.eq(weight_loads + 1)

        # Status, events and counters.
        busy = Signal()
        inferences, frame_errors = Signal(32), Signal(32)
        result_valid = Signal()
        with m.If(framer_in.receiving):
            m.d.axi += busy.eq(1)
        with m.If(framer_out.done):
            m.d.axi += [busy.eq(0), result_valid.eq(prog.is_classifier & ~framer_out.dropped)]
            with m.If(~framer_out.dropped):
                m.d.axi += inferences.eq(inferences + 1)
        frame_error = framer_in.early | framer_in.late
        with m.If(frame_error):
            m.d.axi += frame_errors.eq(frame_errors + 1)
        with m.If(soft_reset):
            m.d.axi += [busy.eq(0), inferences.eq(0), frame_errors.eq(0), result_valid.eq(0), weight_loads.eq(0)]

        cfg = prog.config
        constants = {
            "ID": regs.ID_VALUE,
            "VERSION": _fields("VERSION", major=regs.VERSION_MAJOR, minor=regs.VERSION_MINOR),
            "ARRAY": _fields("ARRAY", rows=cfg.rows, cols=cfg.cols, ops=len(prog.ops), runtime_weights=int(runtime)),
            "BUS": _fields("BUS", input_bits=self._input_shape.tdata_bits, output_bits=self._output_shape.tdata_bits),
            "FRAME": _fields("FRAME", input_beats=self._input_shape.tdata_beats,
                             output_beats=self._output_shape.tdata_beats),
            "MODEL_HASH": prog.fingerprint(),
        }
        for name, value in constants.items():
            m.d.comb += getattr(registers, f"hw_{name}").eq(value)
        status, irq, result = registers.hw_STATUS, registers.hw_IRQ, registers.hw_RESULT
        m.d.comb += [
            status[_lsb("STATUS", "idle")].eq(~busy), status[_lsb("STATUS", "busy")].eq(busy),
            status[_lsb("STATUS", "frame_early")].eq(framer_in.early),
            status[_lsb("STATUS", "frame_late")].eq(framer_in.late),
            status[_lsb("STATUS", "weights_error")].eq(weights_error),
            irq[_lsb("IRQ", "done")].eq(framer_out.done), irq[_lsb("IRQ", "error")].eq(frame_error | weights_error),
            irq[_lsb("IRQ", "weights_loaded")].eq(weights_done), registers.hw_WEIGHT_LOADS.eq(weight_loads),
            result[:regs.BY_NAME["RESULT"].fields[0].width].eq(framer_out.class_index),
            result[_lsb("RESULT", "valid")].eq(result_valid),
            registers.hw_INFERENCES.eq(inferences), registers.hw_FRAME_ERRORS.eq(frame_errors),
            registers.hw_LAST_CYCLES.eq(core.perf_cycles), registers.hw_LAST_BUSY.eq(core.perf_busy),
            core.perf_select.eq(registers.PHASE_SELECT),
            registers.hw_PHASE_CYCLES.eq(core.perf_phase_cycles), registers.hw_PHASE_BUSY.eq(core.perf_phase_busy),
            self.irq.eq(registers.CONTROL[_lsb("CONTROL", "irq_enable")] & (registers.IRQ != 0)),
        ]
        return m
