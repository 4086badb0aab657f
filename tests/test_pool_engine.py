"""``PoolEngine`` on Amaranth's simulator with a Python activation memory (one-cycle read
latency), against the integer reference's max-pooling and a lane-wise NumPy model."""
import numpy as np
import pytest
import torch

from hdl.compiler.program import PoolOp, lower
from hdl.compiler.widths import Widths
from hdl.config import AcceleratorConfig
from hdl.gateware.pool_engine import PoolEngine, pool_params, pool_params_layout
from hdl.gateware.window import WindowAddress
from pytorch_ref.ir import integer_semantics as sem
from pytorch_ref.ir.quantized_model import (Conv2dLayer, MaxPool2dLayer, QuantizedModel, QuantParams,
                                            Requantization)
from pytorch_ref.reference import run_layer
from tests.component_sim import ReadLatency, run_bench, read_tensor


def _program(rows, cols, batch):
    """A 1x1 convolution (so that the pool ops have a program) and two pooling layers:
    3x3 / stride 2 / padding 1, then (2, 3) / stride (1, 2) / padding (1, 1)."""
    rng = np.random.default_rng(rows * 10 + cols)
    conv = Conv2dLayer("conv", rng.integers(-5, 6, (5, 2, 1, 1)).astype(np.int8), np.zeros(5, np.int32),
                       QuantParams(0.1, 0), QuantParams(0.1, 0),
                       Requantization(np.full(5, 2 ** 30, np.int64), np.full(5, 40, np.int64), 0, -128))
    pools = (MaxPool2dLayer("pool1", (3, 3), (2, 2), (1, 1)), MaxPool2dLayer("pool2", (2, 3), (1, 2), (1, 1)))
    model = QuantizedModel("pools", (2, 5, 5), QuantParams(0.1, 0), (conv,) + pools)
    program = lower(model, AcceleratorConfig(rows=rows, cols=cols, input_bus_bits=64), batch=batch)
    return program, pools


def _lanewise_pool(mem, op: PoolOp, bank):
    """Every lane of every output word (lanes past the channels included), by brute force."""
    src, dst = op.source, op.dest
    (kh, kw), (sh, sw), (ph, pw) = op.kernel, op.stride, op.padding
    words = {}
    for img in range(dst.images):
        for oy in range(dst.height):
            for ox in range(dst.width):
                for q in range(dst.words_per_pixel):
                    best = [None] * bank
                    for i in range(kh):
                        for j in range(kw):
                            iy, ix = oy * sh + i - ph, ox * sw + j - pw
                            if 0 <= iy < src.height and 0 <= ix < src.width:
                                word = mem[src.base + ((img * src.height + iy) * src.width + ix)
                                           * src.words_per_pixel + q]
                            else:
                                word = [sem.MAXPOOL_PAD_VALUE] * bank
                            best = [v if b is None else max(b, v) for b, v in zip(best, word)]
                    addr = dst.base + ((img * dst.height + oy) * dst.width + ox) * dst.words_per_pixel + q
                    words[addr] = best
    return words


def _random_program(seed):
    """A 1x1 convolution then one random pooling layer (kernel, stride, padding up to half
    the kernel as PyTorch allows), on a random array shape and batch."""
    rng = np.random.default_rng(500 + seed)
    rows, cols = (int(v) for v in rng.choice([1, 2, 3, 4], size=2))
    c = int(rng.integers(1, 10))
    h, w = int(rng.integers(2, 7)), int(rng.integers(2, 7))
    kernel = (int(rng.integers(1, min(h, 4) + 1)), int(rng.integers(1, min(w, 4) + 1)))
    stride = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    padding = (int(rng.integers(0, kernel[0] // 2 + 1)), int(rng.integers(0, kernel[1] // 2 + 1)))
    conv = Conv2dLayer("conv", rng.integers(-5, 6, (c, 1, 1, 1)).astype(np.int8), np.zeros(c, np.int32),
                       QuantParams(0.1, 0), QuantParams(0.1, 0),
                       Requantization(np.full(c, 2 ** 30, np.int64), np.full(c, 40, np.int64), 0, -128))
    pool = MaxPool2dLayer("pool", kernel, stride, padding)
    model = QuantizedModel("pool", (1, h, w), QuantParams(0.1, 0), (conv, pool))
    program = lower(model, AcceleratorConfig(rows=rows, cols=cols), batch=int(rng.integers(1, 3)))
    return program, (pool,)


@pytest.mark.parametrize("seed", range(6))
def test_random_pool_op_matches_reference(seed):
    program, layers = _random_program(seed)
    _check_pool_ops(program, layers, seed)


def _same_conv(rng, name, c_in, c_out, k):
    """A ``k x k`` convolution with "same" padding, small random weights and a
    requantization that keeps the codes apart."""
    return Conv2dLayer(name, rng.integers(-5, 6, (c_out, c_in, k, k)).astype(np.int8), np.zeros(c_out, np.int32),
                       QuantParams(0.1, 0), QuantParams(0.1, 0),
                       Requantization(np.full(c_out, 2 ** 30, np.int64), np.full(c_out, 40, np.int64), 0, -128),
                       padding=(k // 2, k // 2))


def _packed_program(rows, cols, channels, kernel, batch):
    """A 1x1 convolution to ``channels``, a pooling layer, then a 3x3 convolution that
    folds: the pool writes its output packed."""
    rng = np.random.default_rng(700 + rows * 10 + channels)
    pool = MaxPool2dLayer("pool", kernel, (1, 2), (0, 1))
    model = QuantizedModel("packed", (2, 4, 5), QuantParams(0.1, 0), (_same_conv(rng, "c1", 2, channels, 1), pool,
                                                                       _same_conv(rng, "c2", channels, 3, 3)))
    program = lower(model, AcceleratorConfig(rows=rows, cols=cols, input_bus_bits=128), batch=batch)
    return program, (pool,)


@pytest.mark.parametrize("rows, cols, channels, kernel, batch",
                         [(8, 4, 3, (2, 2), 2), (8, 4, 5, (1, 2), 1), (8, 8, 11, (2, 3), 1), (4, 2, 6, (2, 1), 2),
                          (8, 8, 20, (2, 2), 1), (4, 4, 18, (3, 2), 2)])
def test_pool_writes_packed_output(rows, cols, channels, kernel, batch):
    """Reads of one to four words rotated into the words after them (written a cycle
    apart), lanes past the channels not written, at every lane offset a pixel can start
    on; 18 channels in 4-lane words take a read of four words and one of one."""
    program, layers = _packed_program(rows, cols, channels, kernel, batch)
    pool, conv = program.ops[1:]
    assert pool.dest.packed_lanes and conv.folded and pool.dest is conv.source
    want_words = {3: 1, 5: 1, 11: 2, 6: 1, 20: 3, 18: 4}[channels]
    assert pool.words_per_read == want_words
    _check_pool_ops(program, layers, rows + channels)


def _row_read_program(rows, cols, channels, kernel, stride, padding, then_fold):
    """A 1x1 convolution to ``channels``, then a pooling layer with no horizontal
    padding, then (``then_fold``) a 3x3 convolution that folds, so the pool writes packed."""
    rng = np.random.default_rng(800 + rows * 10 + channels)
    pool = MaxPool2dLayer("pool", kernel, stride, padding)
    layers = (_same_conv(rng, "c1", 2, channels, 1), pool) + ((_same_conv(rng, "c2", channels, 3, 3),) if then_fold else ())
    model = QuantizedModel("rows", (2, 7, 9), QuantParams(0.1, 0), layers)
    program = lower(model, AcceleratorConfig(rows=rows, cols=cols, input_bus_bits=128), batch=2)
    return program, (pool,)


@pytest.mark.parametrize("rows, cols, channels, kernel, stride, padding, then_fold, taps, words", [
    (4, 4, 5, (2, 2), (2, 2), (0, 0), False, 2, 2),     # two taps of two words: the read's four words
    (4, 4, 3, (3, 3), (1, 2), (1, 0), False, 3, 1),     # three one-word taps; rows of vertical padding
    (8, 8, 6, (2, 4), (1, 1), (1, 0), False, 4, 1),     # four one-word taps
    (4, 4, 2, (2, 2), (2, 1), (0, 0), True, 2, 1),      # packed output (two words a pixel) after two reads
    (4, 4, 5, (2, 2), (2, 2), (0, 0), True, 1, 2),      # packed output of three words: a tap a read
])
def test_pool_reads_kernel_rows_at_once(rows, cols, channels, kernel, stride, padding, then_fold, taps, words):
    """Where a kernel row's pixels fit a read (and nothing pads them horizontally), one
    read takes the whole row: the op needs 1 / kw of the reads."""
    program, layers = _row_read_program(rows, cols, channels, kernel, stride, padding, then_fold)
    pool = program.ops[1]
    assert (pool.taps_per_read, pool.words_per_read, bool(pool.dest.packed_lanes)) == (taps, words, then_fold)
    assert pool.steps == pool.dest.pixels * pool.reads_per_pixel * kernel[0] * kernel[1] // taps
    _check_pool_ops(program, layers, rows + channels)


@pytest.mark.parametrize("rows, cols, batch", [(2, 4, 2), (2, 2, 1)])
def test_pool_ops_match_reference(rows, cols, batch):
    program, layers = _program(rows, cols, batch)
    pool_ops = [op for op in program.ops if isinstance(op, PoolOp)]
    assert [op.name for op in pool_ops] == ["pool1", "pool2"] and pool_ops[1].source == pool_ops[0].dest
    assert any(op.padding != (0, 0) and op.stride != op.kernel for op in pool_ops)
    _check_pool_ops(program, layers, rows + batch)


def _check_pool_ops(program, layers, seed):
    """Runs the program's pool ops in order on one engine and one memory model."""
    bank = program.config.bank_width
    pool_ops = [op for op in program.ops if isinstance(op, PoolOp)]
    widths = Widths.of(program)
    read_words = max(op.read_words for op in pool_ops)
    dut = PoolEngine.for_ops(widths, bank, program.config.data_bits, pool_ops)
    layout = pool_params_layout(widths, bank)
    rng = np.random.default_rng(seed)
    # Random words everywhere, lanes past the channels too; -128 and 127 appear often.
    mem = [[int(v) for v in rng.choice([-128, 127, *range(-20, 20)], size=bank)]
           for _ in range(program.activation_words)]
    results = []

    async def bench(ctx):
        delay_read = ReadLatency([0] * (read_words * bank))
        for op in pool_ops:
            before = [list(w) for w in mem]
            ctx.set(dut.params, layout.const(pool_params(op, bank)))
            ctx.set(dut.start, 1)
            writes, cycles = [], 0
            while True:
                busy = ctx.get(dut.busy)
                if cycles > 0 and not busy:
                    break
                assert cycles == 0 or busy
                # This cycle's read address and write; the edge then writes, and the read
                # is answered after it with the word from before the write.
                addr = ctx.get(dut.read.addr)
                write = None
                if ctx.get(dut.write.valid):
                    payload = ctx.get(dut.write.payload)
                    write = (payload.addr, [int(v) for v in payload.data], payload.lanes)
                    writes.append(write)
                await ctx.tick()
                ctx.set(dut.start, 0)
                data = [v for a in range(addr, addr + read_words) for v in (mem[a] if a < len(mem) else [0] * bank)]
                if write is not None:
                    for lane in range(bank):
                        if write[2] >> lane & 1:
                            mem[write[0]][lane] = write[1][lane]
                ctx.set(dut.read.data, delay_read(data))
                cycles += 1
                assert cycles < 2 * op.steps + 20, "busy never fell"
            # Nothing more is written once busy has fallen.
            for _ in range(6):
                assert not ctx.get(dut.write.valid) and not ctx.get(dut.busy)
                await ctx.tick()
            results.append((op, before, [list(w) for w in mem], writes, cycles))

    run_bench(dut, bench)

    assert len(results) == len(pool_ops)
    for op, before, after, writes, cycles in results:
        if op.dest.packed_lanes:
            # Each element of the packed tensor written exactly once, nothing else.
            counts = {}
            for addr, _, lanes in writes:
                for lane in range(bank):
                    if lanes >> lane & 1:
                        counts[addr, lane] = counts.get((addr, lane), 0) + 1
            elements = range(op.dest.base * bank, op.dest.base * bank + op.dest.pixels * op.dest.channels)
            assert counts == {divmod(e, bank): 1 for e in elements}, f"{op.name}: lanes written"
            # One write per word a read's lanes touch, no more (empty ones are skipped).
            per_read, c = op.words_per_read * bank, op.dest.channels
            spans = [(p * c + q * per_read, p * c + min(c, (q + 1) * per_read))
                     for p in range(op.dest.pixels) for q in range(op.reads_per_pixel)]
            assert len(writes) == sum((end - 1) // bank - start // bank + 1 for start, end in spans)
            assert op.steps <= cycles <= op.steps + 8 + PoolEngine.TAP_LATENCY + WindowAddress.LATENCY, \
                f"{op.name}: {cycles} cycles for {op.steps} reads"
        else:
            want = _lanewise_pool(before, op, bank)
            # Every output word written exactly once, whole words, nothing else touched.
            assert sorted(a for a, _, _ in writes) == sorted(want), f"{op.name}: written addresses"
            assert all(lanes == (1 << bank) - 1 for _, _, lanes in writes)
            for addr, data, _ in writes:
                assert data == want[addr], f"{op.name}: word {addr}: expected {want[addr]}, got {data}"
            assert all(after[a] == before[a] for a in range(len(before)) if a not in want)
            # One read a cycle, no stalls: the op takes its reads plus the pipeline's depth (and
            # the start and busy registers' cycles).
            assert op.steps <= cycles <= op.steps + 9 + PoolEngine.TAP_LATENCY + WindowAddress.LATENCY, \
                f"{op.name}: {cycles} cycles for {op.steps} reads"
        # The channels against the integer reference (PyTorch max-pool, -128 padding).
        layer = next(l for l in layers if l.name == op.name)
        source = torch.as_tensor(read_tensor(before, op.source, bank), dtype=torch.int8)
        reference = run_layer(layer, source).numpy().astype(np.int64)
        np.testing.assert_array_equal(read_tensor(after, op.dest, bank), reference, err_msg=op.name)


def test_padding_never_wins():
    """An input of all -128 except one cell: padding reads -128 too, so the output is
    -128 wherever the window misses that cell and its value where it covers it."""
    program, layers = _program(2, 2, 1)
    op = next(op for op in program.ops if op.name == "pool1")
    bank = program.config.bank_width
    src, dst = op.source, op.dest
    mem = [[-128] * bank for _ in range(program.activation_words)]
    mem[src.base + (2 * src.width + 4) * src.words_per_pixel][1] = -127     # channel 1 at (2, 4)
    widths = Widths.of(program)
    dut = PoolEngine(widths, bank, program.config.data_bits, op.words_per_read)

    async def bench(ctx):
        delay_read = ReadLatency([0] * (op.words_per_read * bank))
        ctx.set(dut.params, pool_params_layout(widths, bank).const(pool_params(op, bank)))
        ctx.set(dut.start, 1)
        for cycle in range(op.steps + 20):
            addr = ctx.get(dut.read.addr)
            write = (ctx.get(dut.write.payload.addr), [int(v) for v in ctx.get(dut.write.payload.data)]) \
                if ctx.get(dut.write.valid) else None
            await ctx.tick()
            ctx.set(dut.start, 0)
            ctx.set(dut.read.data, delay_read([v for a in range(addr, addr + op.words_per_read)
                                               for v in (mem[a] if a < len(mem) else [0] * bank)]))
            if write:
                mem[write[0]] = write[1]

    run_bench(dut, bench)
    out = read_tensor(mem, dst, bank)[0, 1]
    # 5x5 input, 3x3 windows at stride 2 from -1: column x = 4 lies only in ox = 2 (x 3..5),
    # row y = 2 only in oy = 1 (y 1..3).
    want = np.full((3, 3), -128)
    want[1, 2] = -127
    np.testing.assert_array_equal(out, want)
    assert (read_tensor(mem, dst, bank)[0, [0, 2, 3, 4]] == -128).all()
