"""cocotb testbench of ``neural_network_accelerator_axi`` with cocotbext-axi.

An ``AxiStreamSource`` and ``AxiStreamSink`` with seeded pause generators carry the
frames; an ``AxiLiteMaster`` reads and writes the registers. One scenario, in order:
the constant registers and bad addresses; inferences checked exactly against the
integer reference, with the interrupt, the result and the counters; an input frame
that ends early and one that ends late (error bits, interrupt, no output, and the next
inference exact without a reset); a soft reset while an output is held back; frames
sent back to back. Each check is recorded in the results file (``NNACCEL_RESULTS``),
and the test fails on the first failed check.
"""
from __future__ import annotations

import json
import os
import pickle
import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout
from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiResp, AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from hdl.gateware.axi import registers as regs
from hdl.gateware.axi.top import frame_shapes
from hdl.host import pack_input, unpack_output
from pytorch_ref.ir.atomic_file import atomic_output

CLOCK_PERIOD_NS = 10


def _pauses(rng: random.Random, probability: float):
    while True:
        yield rng.random() < probability


def _to_bytes(pieces: list[int], bits: int) -> bytes:
    return b"".join(p.to_bytes(bits // 8, "little") for p in pieces)


def _from_bytes(data: bytes, bits: int) -> list[int]:
    step = bits // 8
    return [int.from_bytes(data[i:i + step], "little") for i in range(0, len(data), step)]


def _field(register: str, name: str, value: int) -> int:
    f = next(f for f in regs.BY_NAME[register].fields if f.name == name)
    return (value >> f.lsb) & ((1 << f.width) - 1)


def _bit(register: str, name: str) -> int:
    return next(f.mask for f in regs.BY_NAME[register].fields if f.name == name)


class AxiBench:
    def __init__(self, dut, case: dict):
        self.dut, self.case, self.program = dut, case, case["program"]
        self.in_frame, self.out_frame = frame_shapes(self.program, case["input_tdata_bits"],
                                                     case["output_tdata_bits"])
        rng = random.Random(case["seed"])
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.aclk, dut.aresetn,
                                      reset_active_level=False)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.aclk, dut.aresetn,
                                  reset_active_level=False)
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axi"), dut.aclk, dut.aresetn,
                                  reset_active_level=False)
        self.source.set_pause_generator(_pauses(random.Random(rng.random()), case["pause_probability"]))
        self.sink_pauses = _pauses(random.Random(rng.random()), case["pause_probability"])
        self.sink.set_pause_generator(self.sink_pauses)
        self.weights = None
        if case.get("reload"):
            self.weights = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis_weights"), dut.aclk, dut.aresetn,
                                           reset_active_level=False)
            self.weights.set_pause_generator(_pauses(random.Random(rng.random()), case["pause_probability"]))
        self.checks: list[dict] = []

    def check(self, name: str, ok: bool, detail=None):
        self.checks.append({"check": name, "ok": bool(ok), "detail": detail})
        self.dut._log.info("%s %s%s", "ok  " if ok else "FAIL", name, f": {detail}" if detail is not None else "")

    async def reset(self):
        self.dut.aresetn.value = 0
        await ClockCycles(self.dut.aclk, 4)
        self.dut.aresetn.value = 1
        await ClockCycles(self.dut.aclk, 2)

    async def read(self, name: str) -> int:
        return await self.axil.read_dword(regs.BY_NAME[name].offset)

    async def write(self, name: str, value: int):
        await self.axil.write_dword(regs.BY_NAME[name].offset, value)

    def frame(self, codes: np.ndarray) -> bytes:
        return _to_bytes(self.in_frame.split(pack_input(self.program, codes)), self.in_frame.tdata_bits)

    async def receive(self) -> np.ndarray:
        frame = await with_timeout(self.sink.recv(), self.case["timeout_cycles"] * CLOCK_PERIOD_NS, "ns")
        pieces = _from_bytes(bytes(frame.tdata), self.out_frame.tdata_bits)
        self.check("output frame length", len(pieces) == self.out_frame.tdata_beats,
                   [len(pieces), self.out_frame.tdata_beats])
        return unpack_output(self.program, self.out_frame.join(pieces))

    async def wait_interrupt(self):
        if not self.dut.irq.value:
            await with_timeout(RisingEdge(self.dut.irq), self.case["timeout_cycles"] * CLOCK_PERIOD_NS, "ns")

    async def wait_idle(self):
        for _ in range(self.case["timeout_cycles"] // 4):
            if (await self.read("STATUS")) & _bit("STATUS", "idle"):
                return
        raise TimeoutError("the accelerator did not become idle")

    async def infer_and_check(self, index: int, label: str):
        codes, expected = self.case["inputs"][index], self.case["expected"][index]
        await self.source.send(self.frame(codes))
        actual = await self.receive()
        self.check(f"{label}: output equals the reference", np.array_equal(actual, expected),
                   None if np.array_equal(actual, expected) else int((actual != expected).sum()))
        return expected

    async def constants(self):
        cfg, p = self.program.config, self.program
        expected = {
            "ID": regs.ID_VALUE, "VERSION": (regs.VERSION_MAJOR << 16) | regs.VERSION_MINOR,
            "ARRAY": cfg.rows | cfg.cols << 8 | len(p.ops) << 16 | int(cfg.runtime_weights) << 24,
            "BUS": self.in_frame.tdata_bits | self.out_frame.tdata_bits << 16,
            "FRAME": self.in_frame.tdata_beats | self.out_frame.tdata_beats << 16,
            "MODEL_HASH": p.fingerprint(),
            "STATUS": _bit("STATUS", "idle"), "IRQ": 0, "INFERENCES": 0, "FRAME_ERRORS": 0,
        }
        for name, value in expected.items():
            got = await self.read(name)
            self.check(f"register {name} after reset", got == value, f"{got:#x} (expected {value:#x})")
        await self.write("ID", 0)
        self.check("ID is read-only", await self.read("ID") == regs.ID_VALUE)
        unmapped = max(r.offset for r in regs.REGISTERS) + 4
        read = await self.axil.read(unmapped, 4)
        self.check("a read outside the map answers SLVERR", read.resp == AxiResp.SLVERR, str(read.resp))
        write = await self.axil.write(unmapped, b"\0\0\0\0")
        self.check("a write outside the map answers SLVERR", write.resp == AxiResp.SLVERR, str(write.resp))
        await self.write("PHASE_SELECT", 0x1FF)
        got = await self.read("PHASE_SELECT")
        self.check("PHASE_SELECT keeps its 8 bits", got == 0xFF, f"{got:#x}")
        await self.axil.write(regs.BY_NAME["PHASE_SELECT"].offset, b"\x12", )     # one byte lane
        got = await self.read("PHASE_SELECT")
        self.check("write strobes select bytes", got == 0x12, f"{got:#x}")

    async def inference_with_interrupt(self, index: int):
        await self.write("CONTROL", _bit("CONTROL", "irq_enable"))
        expected = await self.infer_and_check(index, f"input {index}")
        await self.wait_interrupt()
        irq = await self.read("IRQ")
        self.check("IRQ.done after an inference", irq == _bit("IRQ", "done"), f"{irq:#x}")
        if self.program.is_classifier:
            result = await self.read("RESULT")
            self.check("RESULT holds the predicted class",
                       result == (int(np.argmax(expected)) | _bit("RESULT", "valid")), f"{result:#x}")
        cycles, busy = await self.read("LAST_CYCLES"), await self.read("LAST_BUSY")
        phase_cycles, phase_busy = 0, 0
        for phase in range(len(self.program.ops) + 2):
            await self.write("PHASE_SELECT", phase)
            phase_cycles += await self.read("PHASE_CYCLES")
            phase_busy += await self.read("PHASE_BUSY")
        self.check("LAST_CYCLES is the sum of the phases' cycles", cycles > 0 and cycles == phase_cycles,
                   [cycles, phase_cycles])
        self.check("LAST_BUSY is the sum of the phases' steps", busy > 0 and busy == phase_busy, [busy, phase_busy])
        self.check("the array steps cover the MACs", busy * self.program.config.rows * self.program.config.cols
                   >= sum(op.macs for op in self.program.gemm_ops), busy)
        await self.write("IRQ", _bit("IRQ", "done"))
        await ClockCycles(self.dut.aclk, 1)
        self.check("writing 1 to IRQ.done clears the interrupt", not self.dut.irq.value)

    async def frame_error(self, kind: str, index: int):
        pieces = self.in_frame.split(pack_input(self.program, self.case["inputs"][index]))
        pieces = pieces[:len(pieces) // 2] if kind == "early" else pieces + pieces[:3]
        await self.source.send(_to_bytes(pieces, self.in_frame.tdata_bits))
        await self.wait_interrupt()
        await self.source.wait()
        await self.wait_idle()                           # the dropped inference has ended
        status, irq = await self.read("STATUS"), await self.read("IRQ")
        self.check(f"{kind} frame: STATUS.frame_{kind}", status & _bit("STATUS", f"frame_{kind}"), f"{status:#x}")
        self.check(f"{kind} frame: IRQ.error", irq & _bit("IRQ", "error"), f"{irq:#x}")
        self.check(f"{kind} frame: its output is dropped", self.sink.empty())
        self.check(f"{kind} frame: RESULT not valid", not (await self.read("RESULT")) & _bit("RESULT", "valid"))
        await self.write("STATUS", _bit("STATUS", f"frame_{kind}"))
        await self.write("IRQ", _bit("IRQ", "error") | _bit("IRQ", "done"))
        status = await self.read("STATUS")
        self.check(f"{kind} frame: writing 1 clears the error bit", not status & _bit("STATUS", f"frame_{kind}"),
                   f"{status:#x}")

    async def soft_reset_with_output_held(self, index: int):
        self.sink.clear_pause_generator()
        self.sink.pause = True
        await self.source.send(self.frame(self.case["inputs"][index]))
        await self.source.wait()
        await ClockCycles(self.dut.aclk, self.case["timeout_cycles"] // 2)
        self.check("busy while the output is held", (await self.read("STATUS")) & _bit("STATUS", "busy"))
        await self.write("CONTROL", _bit("CONTROL", "soft_reset") | _bit("CONTROL", "irq_enable"))
        status, count = await self.read("STATUS"), await self.read("INFERENCES")
        self.check("soft reset: idle, counters cleared", status & _bit("STATUS", "idle") and count == 0,
                   [hex(status), count])
        self.check("soft reset keeps irq_enable", await self.read("CONTROL") == _bit("CONTROL", "irq_enable"))
        self.sink.pause = False
        self.sink.set_pause_generator(self.sink_pauses)
        await ClockCycles(self.dut.aclk, 20)
        self.check("soft reset: the held output is gone", self.sink.empty())

    async def back_to_back(self, indices: list[int]):
        for index in indices:
            await self.source.send(self.frame(self.case["inputs"][index]))
        for index in indices:
            actual = await self.receive()
            expected = self.case["expected"][index]
            self.check(f"back to back, input {index}: output equals the reference", np.array_equal(actual, expected))
        count = await self.read("INFERENCES")
        self.check("INFERENCES counts the outputs sent since the soft reset", count == 1 + len(indices), count)


    async def load_image(self, beats: list[int], label: str, expect: str):
        """Send a weight image on s_axis_weights and check the interrupt cause it raises."""
        await self.weights.send(_to_bytes(beats, 32))
        await self.weights.wait()
        await self.wait_interrupt()
        irq = await self.read("IRQ")
        if expect == "loaded":
            self.check(f"{label}: IRQ.weights_loaded", irq == _bit("IRQ", "weights_loaded"), f"{irq:#x}")
        else:
            status = await self.read("STATUS")
            self.check(f"{label}: STATUS.weights_error and IRQ.error",
                       status & _bit("STATUS", "weights_error") and irq & _bit("IRQ", "error"), [hex(status), hex(irq)])
            await self.write("STATUS", _bit("STATUS", "weights_error"))
        await self.write("IRQ", irq)

    async def weight_reload(self):
        """Another model's weights, loaded at run time: its outputs exact, also after a soft
        reset; a cut image is an error; the first model's image restores it."""
        reload = self.case["reload"]
        self.check("ARRAY.runtime_weights", (await self.read("ARRAY")) & _bit("ARRAY", "runtime_weights"))
        await self.write("IRQ", regs.BY_NAME["IRQ"].mask("w1c"))       # the inferences' done bits
        await self.load_image(reload["image"], "the other model's image", "loaded")
        self.check("WEIGHT_LOADS counts it", await self.read("WEIGHT_LOADS") == 1)
        for index, (codes, expected) in enumerate(zip(reload["inputs"], reload["expected"])):
            if index == 1:
                await self.write("CONTROL", _bit("CONTROL", "soft_reset") | _bit("CONTROL", "irq_enable"))
            await self.source.send(self.frame(codes))
            actual = await self.receive()
            self.check(f"reloaded model, input {index}{' after a soft reset' if index else ''}: output equals "
                       f"its reference", np.array_equal(actual, expected))
        await self.load_image(reload["restore"][:10], "an image cut short", "error")
        await self.load_image(reload["restore"], "the first model's image again", "loaded")
        await self.infer_and_check(0, "restored model, input 0")


@cocotb.test()
async def run_axi(dut):
    with open(os.environ["NNACCEL_CASE"], "rb") as f:
        case = pickle.load(f)
    if len(case["inputs"]) < 4:
        raise ValueError("the AXI scenario needs at least 4 inputs")
    # In reset before the first edge, and the first edge half a period in, once the
    # outputs have settled: GHDL starts every signal at 'U'.
    dut.aresetn.value = 0
    cocotb.start_soon(Clock(dut.aclk, CLOCK_PERIOD_NS, unit="ns").start(start_high=False))
    bench = AxiBench(dut, case)
    try:
        await bench.reset()
        await bench.constants()
        await bench.inference_with_interrupt(0)
        await bench.frame_error("early", 1)
        await bench.infer_and_check(1, "after an early frame, input 1")
        await bench.frame_error("late", 2)
        await bench.infer_and_check(2, "after a late frame, input 2")
        await bench.soft_reset_with_output_held(3)
        await bench.infer_and_check(3, "after a soft reset, input 3")
        await bench.back_to_back(list(range(len(case["inputs"]))))
        if case.get("reload"):
            await bench.weight_reload()
    finally:
        with atomic_output(os.environ["NNACCEL_RESULTS"]) as f:
            json.dump({"checks": bench.checks}, f)
    failed = [c["check"] for c in bench.checks if not c["ok"]]
    assert not failed, "failed checks: " + "; ".join(failed)
