"""Control-side components on Amaranth's simulator, against Python models:
``PerfCounters``, ``ActivationMemory``, ``OpTable`` and ``Sequencer``."""
from collections import deque

import numpy as np
import pytest

from hdl.compiler.program import GemmOp, PoolOp, lower
from hdl.compiler.widths import Widths
from hdl.config import AcceleratorConfig
from hdl.gateware.activation_memory import ActivationMemory, Reader
from hdl.gateware.op_table import OpTable
from hdl.gateware.perf_counters import PerfCounters
from hdl.gateware.sequencer import Sequencer
from pytorch_ref.ir.quantized_model import (Conv2dLayer, DenseLayer, FlattenLayer, MaxPool2dLayer, QuantizedModel,
                                            QuantParams, Requantization)
from tests.component_sim import run_bench


# --- PerfCounters -------------------------------------------------------------------------

class PerfModel:
    """Counts from the ``start`` cycle to the ``stop`` cycle, both included."""

    def __init__(self, slots):
        self.slots = slots
        self.counting = False
        self.total = self.busy = 0
        self.last = (0, 0)
        self.slot_cycles, self.slot_busy = [0] * slots, [0] * slots

    def cycle(self, start, stop, busy, slot):
        if start:
            self.counting = True
            self.total = self.busy = 0
            self.slot_cycles, self.slot_busy = [0] * self.slots, [0] * self.slots
        if self.counting:
            self.total += 1
            self.busy += busy
            self.slot_cycles[slot] += 1
            self.slot_busy[slot] += busy
            if stop:
                self.last = (self.total, self.busy)
                self.counting = False


def _perf_schedule(rng, length):
    """(start, stop, busy, slot) a cycle: idle gaps, inferences, a restart while counting,
    a one-cycle inference (stop right after start)."""
    schedule, counting = [], False
    while len(schedule) < length:
        r = rng.random()
        start = stop = False
        if not counting and r < 0.08:
            start, counting = True, True
        elif counting and r < 0.03:
            start = True                                  # restart while counting
        elif counting and r < 0.10:
            stop, counting = True, False
        schedule.append((start, stop, bool(rng.random() < 0.5), int(rng.integers(0, 5))))
    schedule += [(True, False, True, 1), (False, True, False, 2)]       # the shortest inference
    schedule += [(False, False, True, 3)] * 3
    return schedule


@pytest.mark.parametrize("slots", [1, 5])
def test_perf_counters_match_model(slots):
    rng = np.random.default_rng(slots)
    schedule = [(a, b, c, d % slots) for a, b, c, d in _perf_schedule(rng, 300)]
    assert sum(s[1] for s in schedule) >= 5
    dut = PerfCounters(slots, bits=16)
    model = PerfModel(slots)

    async def bench(ctx):
        for t, (start, stop, busy, slot) in enumerate(schedule):
            ctx.set(dut.start, start)
            ctx.set(dut.stop, stop)
            ctx.set(dut.busy, busy)
            ctx.set(dut.slot, slot)
            await ctx.tick()
            # The inputs are registered: after this edge the counters show cycles 0 .. t-1.
            assert (ctx.get(dut.last_cycles), ctx.get(dut.last_busy)) == model.last, f"cycle {t}"
            for index in range(slots):
                ctx.set(dut.select, index)
                got = (ctx.get(dut.cycles), ctx.get(dut.busy_cycles))
                assert got == (model.slot_cycles[index], model.slot_busy[index]), f"cycle {t}, slot {index}"
            model.cycle(start, stop, busy, slot)

    run_bench(dut, bench)


def test_perf_counters_count_the_start_and_stop_cycles():
    """Hand-checked: start at cycle 0 (busy), cycles 1-2 (busy, idle), stop at 3 (busy): 4
    cycles, 3 busy; slot 1 holds cycles 0 and 3. The totals latch a cycle after ``stop``
    (the inputs are registered), so not yet at the edge after it."""
    dut = PerfCounters(2, bits=8)

    async def bench(ctx):
        for start, stop, busy, slot in [(1, 0, 1, 1), (0, 0, 1, 0), (0, 0, 0, 0), (0, 1, 1, 1)]:
            ctx.set(dut.start, start)
            ctx.set(dut.stop, stop)
            ctx.set(dut.busy, busy)
            ctx.set(dut.slot, slot)
            await ctx.tick()
        assert (ctx.get(dut.last_cycles), ctx.get(dut.last_busy)) == (0, 0)
        ctx.set(dut.stop, 0)
        await ctx.tick()
        assert (ctx.get(dut.last_cycles), ctx.get(dut.last_busy)) == (4, 3)
        ctx.set(dut.select, 1)
        assert (ctx.get(dut.cycles), ctx.get(dut.busy_cycles)) == (2, 2)
        ctx.set(dut.select, 0)
        assert (ctx.get(dut.cycles), ctx.get(dut.busy_cycles)) == (2, 1)

    run_bench(dut, bench)


# --- ActivationMemory -------------------------------------------------------------------------

def _words(mem, addr, lanes, words):
    """Words ``addr`` ... ``addr + words - 1`` (zero past the end: never written)."""
    return [v for a in range(addr, addr + words) for v in (mem[a] if a < len(mem) else [0] * lanes)]


READ_WORDS = {Reader.GEMM: 2, Reader.POOL: 4, Reader.OUTPUT: 1}


@pytest.mark.parametrize("chunk_entries", [ActivationMemory.CHUNK_ENTRIES, 2])
def test_activation_memory_reader_selection_and_write_priority(chunk_entries):
    """Chunks of 2 entries: each bank (4 entries) is two block RAMs picked after their registers."""
    depth, lanes, bits = 12, 4, 8
    dut = ActivationMemory(depth, 4, lanes, bits, chunk_entries=chunk_entries)
    rng = np.random.default_rng(2)
    mem = [[0] * lanes for _ in range(depth)]
    readers = {Reader.GEMM: dut.gemm_read, Reader.POOL: dut.pool_read, Reader.OUTPUT: dut.output_read}
    writers = [dut.load, dut.gemm_write, dut.pool_write]                  # priority order
    stats = {"collisions": 0, "partial": 0, "reads": {r: 0 for r in Reader}}

    latency = ActivationMemory.WRITE_LATENCY

    def apply(winner):
        addr, data, enables = winner
        stats["partial"] += 0 < enables < (1 << lanes) - 1
        for lane in range(lanes):
            if enables >> lane & 1:
                mem[addr][lane] = data[lane]

    async def bench(ctx):
        pending = deque()                   # (cycle, reader, words) of the reads in flight
        in_flight = deque()                 # (cycle, winner) of the writes not yet visible
        for t in range(300):
            reader = list(Reader)[int(rng.integers(3))]
            ctx.set(dut.reader, reader)
            addrs = {r: int(rng.integers(depth)) for r in Reader}
            # A read a cycle before a write of one of its words is visible is left unspecified.
            previous = [w for at, w in in_flight if at == t - (latency - 1) and w is not None]
            while previous and addrs[reader] <= previous[0][0] < addrs[reader] + 4:
                addrs[reader] = (addrs[reader] + 4) % depth
            for r, port in readers.items():
                ctx.set(port.addr, addrs[r])
            winner = None
            valids = [bool(rng.random() < 0.4) for _ in writers]
            for index, (port, valid) in enumerate(zip(writers, valids)):
                addr = int(rng.integers(depth))
                data = [int(v) for v in rng.integers(-128, 128, lanes)]
                enables = int(rng.integers(0, 1 << lanes))
                ctx.set(port.valid, valid)
                ctx.set(port.payload, {"addr": addr, "data": data, "lanes": enables})
                if valid and winner is None:
                    winner = (addr, data, enables)
            stats["collisions"] += sum(valids) > 1
            # This read sees the writes of WRITE_LATENCY cycles ago and before, not later ones.
            while in_flight and in_flight[0][0] <= t - latency:
                _, done = in_flight.popleft()
                if done is not None:
                    apply(done)
            pending.append((t, reader, _words(mem, addrs[reader], lanes, 4)))
            in_flight.append((t, winner))
            await ctx.tick()
            # The selected reader's words, READ_LATENCY cycles later, on every read port
            # (one, two or four of them from the address on).
            if len(pending) == ActivationMemory.READ_LATENCY:
                at, by, want = pending.popleft()
                for r, port in readers.items():
                    got = [int(v) for v in ctx.get(port.data)]
                    assert got == want[:READ_WORDS[r] * lanes], f"cycle {at}, reader {by}, port {r}"
                stats["reads"][by] += 1
        # Read back everything through each reader in turn, with no writes (once the last
        # ones have landed).
        for port in writers:
            ctx.set(port.valid, 0)
        await ctx.tick().repeat(latency)
        for _, done in in_flight:
            if done is not None:
                apply(done)
        for reader, port in readers.items():
            ctx.set(dut.reader, reader)
            for addr in range(depth):
                ctx.set(port.addr, addr)
                await ctx.tick().repeat(ActivationMemory.READ_LATENCY)
                want = _words(mem, addr, lanes, READ_WORDS[reader])
                assert [int(v) for v in ctx.get(port.data)] == want

    run_bench(dut, bench)
    assert stats["collisions"] > 20 and stats["partial"] > 20 and min(stats["reads"].values()) > 50


@pytest.mark.parametrize("load_words, chunk_entries", [(2, ActivationMemory.CHUNK_ENTRIES), (3, ActivationMemory.CHUNK_ENTRIES),
                                                  (4, ActivationMemory.CHUNK_ENTRIES), (3, 2)])
def test_activation_memory_wide_loads(load_words, chunk_entries):
    """The loader's writes of several consecutive words, from any bank on, with words
    disabled at the end; read back through the pool's four-word port. (Chunks of 2
    entries: banks of 5 entries in three chunks, the last one short.)"""
    depth, lanes, bits = 14, 4, 8
    dut = ActivationMemory(depth, 4, lanes, bits, load_words, chunk_entries=chunk_entries)
    rng = np.random.default_rng(load_words)
    mem = [[0] * lanes for _ in range(depth)]

    async def bench(ctx):
        for _ in range(60):
            addr = int(rng.integers(depth - load_words + 1))
            count = int(rng.integers(1, load_words + 1))
            data = [int(v) for v in rng.integers(-128, 128, lanes * load_words)]
            enables = sum(((1 << lanes) - 1) << (k * lanes) for k in range(count))
            ctx.set(dut.load.valid, 1)
            ctx.set(dut.load.payload, {"addr": addr, "data": data, "lanes": enables})
            await ctx.tick()
            for k in range(count):
                mem[addr + k] = data[k * lanes:(k + 1) * lanes]
        ctx.set(dut.load.valid, 0)
        await ctx.tick().repeat(ActivationMemory.WRITE_LATENCY)
        ctx.set(dut.reader, Reader.POOL)
        for addr in range(depth):
            ctx.set(dut.pool_read.addr, addr)
            await ctx.tick().repeat(ActivationMemory.READ_LATENCY)
            assert [int(v) for v in ctx.get(dut.pool_read.data)] == _words(mem, addr, lanes, 4), addr

    run_bench(dut, bench)


@pytest.mark.parametrize("chunk_entries", [0, 1, 3, 2.0])
def test_activation_memory_rejects_bad_chunk_entries(chunk_entries):
    with pytest.raises(ValueError, match=f"chunk entries must be a power of two of at least 2, not {chunk_entries!r}"):
        ActivationMemory(12, 4, 4, 8, chunk_entries=chunk_entries)


# --- OpTable ------------------------------------------------------------------------------------

def _requant(n: int) -> Requantization:
    return Requantization(np.full(n, 2 ** 30, dtype=np.int64), np.full(n, 40, dtype=np.int64), 0, -128)


def _program():
    rng = np.random.default_rng(3)

    def conv(name, c_in, c_out, k, stride, padding, zp):
        return Conv2dLayer(name, rng.integers(-5, 6, (c_out, c_in) + k).astype(np.int8), np.zeros(c_out, np.int32),
                           QuantParams(0.1, zp), QuantParams(0.1, 0), _requant(c_out), stride=stride, padding=padding)

    layers = (conv("c1", 3, 5, (3, 3), (1, 1), (1, 1), -7),
              MaxPool2dLayer("p1", (2, 2), (2, 2)),
              conv("c2", 5, 6, (2, 1), (1, 1), (0, 0), 3),
              MaxPool2dLayer("p2", (2, 2), (1, 1), (1, 1)),
              FlattenLayer("flat"),
              DenseLayer("fc", rng.integers(-5, 6, (4, 6 * 2 * 3)).astype(np.int8), np.zeros(4, np.int32),
                         QuantParams(0.1, 11), QuantParams(0.1, 0), _requant(4)))
    model = QuantizedModel("table", (3, 4, 4), QuantParams(0.1, -7), layers)
    config = AcceleratorConfig(rows=2, cols=4, accumulator_depth=8, input_bus_bits=64)
    return lower(model, config, batch=2, stack_input_rows=False)


def _as_dict(value):
    """A struct ``Const`` to nested dicts of ints."""
    from amaranth.lib import data
    if isinstance(value, data.Const):
        return {name: _as_dict(getattr(value, name)) for name, _ in value.shape()}
    return int(value)


def _window(op):
    src, dst = op.source, op.dest
    return {"in_base": src.base, "in_h": src.height, "in_w": src.width, "in_cw": src.pixel_stride,
            "in_pixels": src.height * src.width, "kh": op.kernel[0], "kw": op.kernel[1],
            "sh": op.stride[0], "sw": op.stride[1], "ph": op.padding[0], "pw": op.padding[1],
            "out_h": dst.height, "out_w": dst.width}


def test_op_table_holds_each_ops_constants():
    program = _program()
    kinds = [type(op) for op in program.ops]
    assert kinds == [GemmOp, PoolOp, GemmOp, PoolOp, GemmOp]
    dut = OpTable(program, Widths.of(program))
    # Hand-checked numbers of the first op: 4x4x3 input of a batch of 2, packed at word 2
    # (after the guard), folded: 3 kernel rows of 9 values in 5 tiles of 2 rows.
    c1 = program.ops[0]
    assert (c1.source.base, c1.source.pixel_stride, c1.dest.pixels, c1.block) == (2, 3, 32, 8)
    assert (c1.folded, c1.row_tiles, c1.k_tiles) == (True, 5, 15)
    assert not any(op.folded for op in program.gemm_ops[1:])

    async def bench(ctx):
        for index, op in enumerate(program.ops):
            ctx.set(dut.op_index, index)
            # Everything follows after the clock edge (registers), nothing before it.
            await ctx.delay(1e-9)
            if index and isinstance(program.ops[index - 1], GemmOp):
                assert ctx.get(dut.zero_point) == program.ops[index - 1].input_zero_point
            await ctx.tick()
            if isinstance(op, GemmOp):
                taps_w = op.row_tiles if op.folded else op.kernel[1]
                cfg = program.config
                per_tile = cfg.cols // op.split
                want = {"window": _window(op), "folded": int(op.folded), "taps_w": taps_w,
                        "ct_count": 1 if op.folded else op.channel_tiles,
                        "k_tiles": op.kernel[0] * taps_w * (1 if op.folded else op.channel_tiles),
                        "nt_count": op.n_tiles,
                        "block": op.block, "pixels": op.dest.images * op.dest.height * op.dest.width,
                        "out_stride": op.dest.channels if op.dest.packed_lanes
                        else op.dest.words_per_pixel * program.config.bank_width,
                        "out_channels": op.dest.channels if op.dest.packed_lanes
                        else op.n_tiles * per_tile, "out_base": op.dest.base,
                        "w_base": op.weight_base, "w_bits": op.weight_bits, "p_base": op.param_base,
                        "diagonal": int(op.diagonal), "out_nt_step": per_tile,
                        "split": op.split, "split_words": op.split * cfg.rows // cfg.bank_width if op.split > 1 else 0,
                        "out_per_tile": per_tile,
                        "taps_on_rows": 0, "taps": dict.fromkeys(
                            ("in_plane", "in_image", "row_start", "out_col", "out_row", "out_image", "out_nt",
                             "images", "period"), 0)}
                assert _as_dict(ctx.get(dut.gemm)) == want, op.name
                assert ctx.get(dut.zero_point) == op.input_zero_point
            else:
                # Neither pool writes packed here (c2's 5 channels of a 2x1 kernel do not fold);
                # both read their pixels' two words at once, p1 (no padding) both taps of
                # a kernel row at once.
                assert op.words_per_read == 2 and op.reads_per_pixel == 1 and op.dest.words_per_pixel == 2
                want = {"window": _window(op), "out_base": op.dest.base,
                        "pixels": op.dest.images * op.dest.height * op.dest.width, "words": 2, "read_lanes": 8, "reads": 1,
                        "taps": 2 if op.name == "p1" else 1, "out_words": 2, "out_lanes": 0, "last_lanes": 8}
                assert _as_dict(ctx.get(dut.pool)) == want, op.name

    run_bench(dut, bench)
    assert [op.input_zero_point for op in program.gemm_ops] == [-7, 3, 11]


# --- Sequencer ------------------------------------------------------------------------------------

DRAIN = 5


def _run_sequencer(kinds, inferences, seed):
    """Drives a Sequencer for ``kinds`` ('gemm' / 'pool') with an op table and engines of
    random lengths, plus stray ``loaded`` / ``output_done`` pulses while they must be
    ignored. Returns the per-cycle trace and the engines' idle cycles."""
    ops = len(kinds)
    dut = Sequencer([kind == "pool" for kind in kinds], DRAIN)
    rng = np.random.default_rng(seed)
    trace, events = [], []

    async def bench(ctx):
        busy_left, output_left, load_wait = 0, None, int(rng.integers(1, 6))
        loads, rearms, cycle = 0, 0, 0
        while len([e for e in events if e[0] == "rearm"]) < inferences:
            ctx.set(dut.engine_busy, busy_left > 0)
            # The loader: one done pulse per inference; stray pulses later must do nothing.
            loaded = load_wait == 0 or (load_wait < 0 and loads > rearms and rng.random() < 0.1)
            ctx.set(dut.loaded, loaded)
            output_done = output_left == 0 or (output_left is None and rng.random() < 0.1)
            ctx.set(dut.output_done, output_done)
            row = {name: int(ctx.get(getattr(dut, name))) for name in
                   ("op_index", "gemm_start", "pool_start", "output_start", "rearm", "phase")}
            row |= {"reader": ctx.get(dut.reader), "busy": busy_left > 0, "loaded": loaded,
                    "output_done": output_done, "cycle": cycle}
            trace.append(row)
            if load_wait == 0:
                events.append(("loaded", cycle, None))
                loads += 1
            if busy_left == 1:
                events.append(("idle", cycle + 1))
            for name in ("gemm_start", "pool_start", "output_start", "rearm"):
                if row[name]:
                    events.append((name, cycle, row["op_index"]))
            await ctx.tick()
            cycle += 1
            # Engines: busy from the cycle after their start, for a random length.
            busy_left = max(0, busy_left - 1)
            if row["gemm_start"] or row["pool_start"]:
                assert busy_left == 0
                busy_left = int(rng.integers(1, 12))
            load_wait = (-1 if load_wait == 0 else load_wait - 1) if load_wait >= 0 else -1
            if row["rearm"]:
                load_wait = int(rng.integers(1, 6))
                rearms += 1
            if output_left is not None:
                output_left = None if output_left == 0 else output_left - 1
            if row["output_start"]:
                output_left = int(rng.integers(0, 8))
            assert cycle < 5000

    run_bench(dut, bench)
    return trace, events


@pytest.mark.parametrize("kinds", [["gemm", "pool", "gemm", "pool", "gemm"], ["pool", "gemm", "pool"], ["gemm"]])
def test_sequencer_order_and_drain(kinds):
    ops = len(kinds)
    trace, events = _run_sequencer(kinds, inferences=2, seed=ops)
    pulses = [e for e in events if e[0] != "idle"]
    # Expected order per inference: loaded, each op's start of the right kind, output, rearm.
    expected = []
    for _ in range(2):
        expected += ["loaded"] + [f"{k}_start" for k in kinds] + ["output_start", "rearm"]
    assert [e[0] for e in pulses] == expected
    starts = [e for e in pulses if e[0] in ("gemm_start", "pool_start")]
    assert [e[2] for e in starts] == list(range(ops)) * 2                         # op_index at each start
    # loaded -> the first start 2 cycles later; an engine's first idle cycle -> the next start
    # 3 cycles later or the output 1 cycle later, plus DRAIN cycles after a GEMM op only.
    idles = [e[1] for e in events if e[0] == "idle"]
    assert len(idles) == 2 * ops
    by_cycle = {row["cycle"]: row for row in trace}
    for n, (name, cycle, _) in enumerate(pulses):
        if name in ("gemm_start", "pool_start", "output_start"):
            previous = pulses[n - 1]
            # (A start waits a cycle after op_index changes, for the op table's registers.)
            if previous[0] == "loaded":
                assert cycle == previous[1] + 2
                continue
            kind = kinds[previous[2]]
            idle = min(i for i in idles if i > previous[1])
            # (The engines' busy is a register, low a cycle after their activity; the model's
            # engine_busy is that register.)
            want = (1 if name == "output_start" else 3) + (DRAIN if kind == "gemm" else 0)
            assert cycle - idle == want, f"{name} after {kind}: {cycle - idle} cycles after idle, expected {want}"
        if name == "rearm":
            assert by_cycle[cycle]["output_done"]
    # Reader ownership and phases, cycle by cycle; stray loaded / output_done pulses
    # (while they must be ignored) change nothing.
    assert sum(row["loaded"] for row in trace) > 2 and sum(row["output_done"] for row in trace) > 2
    # (While the input loads, no one reads: the reader is left as it was, the GEMM engine's
    # from reset and the output's after an inference.)
    state, current, loading_reader = "load", None, Reader.GEMM
    for row in trace:
        assert not (row["gemm_start"] and row["pool_start"])
        if state == "load":
            assert row["reader"] == loading_reader and row["phase"] == ops, row
            if row["loaded"]:
                state = "ops"
        elif state == "ops":
            assert row["phase"] == row["op_index"], row
            if row["gemm_start"] or row["pool_start"]:
                current = row["op_index"]                  # the reader follows from the next cycle
            elif current is not None:                      # (not before the first op starts)
                assert row["reader"] == (Reader.GEMM if kinds[current] == "gemm" else Reader.POOL), row
            if row["output_start"]:
                state = "output"
        else:
            assert row["reader"] == Reader.OUTPUT and row["phase"] == ops + 1, row
            if row["rearm"]:
                state, current, loading_reader = "load", None, Reader.OUTPUT
    # Nothing starts while an engine is busy.
    assert not any(row["busy"] and (row["gemm_start"] or row["pool_start"]) for row in trace)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_sequencer_needs_an_op():
    with pytest.raises(ValueError, match="a sequencer needs at least one op, not 0"):
        Sequencer([], DRAIN)
