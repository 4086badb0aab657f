"""cocotb testbench of ``neural_network_accelerator``: inputs in, outputs checked exactly.

The case (compiled program, int8 inputs, reference outputs, seed) comes from the pickle
named by ``NNACCEL_CASE``; per-inference results go to the JSON file ``NNACCEL_RESULTS``.
The same code runs on Verilator, Icarus and GHDL: it touches only the top-level ports.
"""
from __future__ import annotations

import json
import os
import pickle
import random
import time

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge, Timer
from cocotb.utils import get_sim_time

from hdl.gateware.perf_counters import PerfCounters
from hdl.host import pack_input, unpack_output
from pytorch_ref.ir.atomic_file import atomic_output
from sim.streams import StreamDriver, StreamMonitor

CLOCK_PERIOD_NS = 10


class AcceleratorBench:
    """Wires the driver and monitor to the DUT and checks results in order."""

    def __init__(self, dut, case: dict):
        self.dut, self.case = dut, case
        self.program = case["program"]
        rng = random.Random(case["seed"])
        dut._log.info("stream seed %d (valid gaps %.2f, back-pressure %.2f)",
                      case["seed"], case["gap_probability"], case["stall_probability"])
        self.driver = StreamDriver(dut.clk, dut.input_data, dut.input_valid, dut.input_ready,
                                   random.Random(rng.random()), case["gap_probability"])
        dut.perf_select.value = 0
        self.monitor = StreamMonitor(dut.clk, dut.output_valid, dut.output_ready, dut.output_last,
                                     {"values": dut.output_values, "onehot": dut.output_data},
                                     random.Random(rng.random()), case["stall_probability"])

    async def reset(self):
        self.dut.reset.value = 1
        await ClockCycles(self.dut.clk, 3)
        self.dut.reset.value = 0
        await RisingEdge(self.dut.clk)

    async def interrupt(self, codes: np.ndarray, at):
        """Start an inference of ``codes`` and reset the design in the middle of it: ``at``
        cycles after its first beat is offered, or (``"output"``) when its first output
        beat is waiting. Afterwards the design must be idle and the next inference exact."""
        sender = cocotb.start_soon(self.driver.send(pack_input(self.program, codes)))
        if at == "output":
            self.dut.output_ready.value = 0
            await RisingEdge(self.dut.output_valid)
        else:
            await ClockCycles(self.dut.clk, int(at))
        sender.cancel()
        self.dut.input_valid.value = 0
        self.dut.output_ready.value = 0
        await self.reset()

    async def load_weights(self, beats: list[int]) -> int:
        """Send a run-time weight image (random valid gaps) and wait for ``weights_done``;
        returns the cycles it took. Raises on ``weights_error``."""
        dut, rng = self.dut, random.Random(len(beats))
        start = get_sim_time("ns")
        for index, value in enumerate(beats):
            if rng.random() < self.case["gap_probability"]:
                dut.weights_valid.value = 0
                await RisingEdge(dut.clk)
            dut.weights_data.value, dut.weights_last.value = value, int(index == len(beats) - 1)
            dut.weights_valid.value = 1
            while True:
                await ReadOnly()
                taken, error = bool(dut.weights_ready.value), bool(dut.weights_error.value)
                done = bool(dut.weights_done.value)
                await RisingEdge(dut.clk)
                if error:
                    raise AssertionError(f"weights_error at image beat {index} of {len(beats)}")
                if taken:
                    break
        dut.weights_valid.value = 0
        if not done:
            raise AssertionError("the image's last beat did not raise weights_done")
        return int((get_sim_time("ns") - start) / CLOCK_PERIOD_NS)

    async def infer(self, codes: np.ndarray, first_stall: int = 0):
        sender = cocotb.start_soon(self.driver.send(pack_input(self.program, codes)))
        beats = await self.monitor.receive(first_stall)
        await sender
        await ClockCycles(self.dut.clk, PerfCounters.LATENCY)      # the counters latch after the last beat
        await Timer(1, unit="ns")
        values = unpack_output(self.program, [b["values"] for b in beats])
        return (values, beats[-1]["onehot"], int(self.dut.perf_cycles.value), int(self.dut.perf_busy.value),
                await self.read_phases())

    async def read_phases(self) -> list[list[int]]:
        """``[cycles, busy steps]`` of each op, then of the input load and of the output."""
        phases = []
        for index in range(len(self.program.ops) + 2):
            self.dut.perf_select.value = index
            await Timer(1, unit="ps")
            phases.append([int(self.dut.perf_phase_cycles.value), int(self.dut.perf_phase_busy.value)])
        return phases


def first_mismatch(expected: np.ndarray, actual: np.ndarray):
    diff = np.flatnonzero(expected.reshape(-1) != actual.reshape(-1))
    if len(diff) == 0:
        return None
    k = int(diff[0])
    return {"element": k, "index": [int(i) for i in np.unravel_index(k, expected.shape)],
            "expected": int(expected.reshape(-1)[k]), "actual": int(actual.reshape(-1)[k]),
            "mismatches": int(len(diff))}


@cocotb.test()
async def run_inferences(dut):
    with open(os.environ["NNACCEL_CASE"], "rb") as f:
        case = pickle.load(f)
    cocotb.start_soon(Clock(dut.clk, CLOCK_PERIOD_NS, unit="ns").start())
    bench = AcceleratorBench(dut, case)
    await bench.reset()
    results, failures = [], []
    start_ns, start_wall = get_sim_time("ns"), time.perf_counter()
    classifier = case["program"].is_classifier
    faults = case.get("faults") or {}
    images = case.get("weights_before") or {}
    if getattr(dut, "weights_valid", None) is not None:     # a design with run-time weights
        dut.weights_valid.value = 0
    for index, (codes, expected) in enumerate(zip(case["inputs"], case["expected"])):
        if index in images:
            cycles = await bench.load_weights(images[index])
            print(f"loaded a weight image of {len(images[index])} beats in {cycles} cycles", flush=True)
        if index in faults.get("reset_at", {}):
            await bench.interrupt(codes, faults["reset_at"][index])
        actual, onehot, cycles, busy, phases = await bench.infer(codes, faults.get("stall", {}).get(index, 0))
        mismatch = first_mismatch(expected, actual)
        expected_onehot = (1 << int(np.argmax(expected))) if classifier else 0
        ok = mismatch is None and onehot == expected_onehot
        results.append({"input": index, "match": ok, "mismatch": mismatch, "cycles": cycles,
                        "busy_steps": busy, "phases": phases, "onehot": onehot, "expected_onehot": expected_onehot,
                        "output": actual.reshape(-1).tolist()})
        if not ok:
            failures.append(f"input {index}: " + (
                f"element {mismatch['index']} expected {mismatch['expected']} got {mismatch['actual']} "
                f"({mismatch['mismatches']} elements differ)" if mismatch
                else f"output_data {onehot:#x}, expected {expected_onehot:#x}"))
        done = index + 1
        bar = "#" * (20 * done // len(case["inputs"]))
        print(f"progress [{bar:<20}] {done}/{len(case['inputs'])} inputs, "
              f"input {index}: {'match' if ok else 'MISMATCH'}, {cycles} cycles", flush=True)
    wall = time.perf_counter() - start_wall
    sim_cycles = (get_sim_time("ns") - start_ns) / CLOCK_PERIOD_NS
    with atomic_output(os.environ["NNACCEL_RESULTS"]) as f:
        json.dump({"results": results, "sim_cycles": sim_cycles, "wall_seconds": wall}, f)
    assert not failures, "outputs differ from the integer reference:\n" + "\n".join(failures)
