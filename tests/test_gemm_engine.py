"""``WeightMemory`` and ``GemmEngine`` on Amaranth's simulator, against Python models.

* ``WeightMemory``: random tile ROMs read at random addresses, one a cycle; PE ``(r, c)``
  must show the tile addressed ``r + c + LATENCY`` cycles earlier (the class docstring).
* ``GemmEngine``: fed by a ``StepGenerator`` (connected as the top level connects them),
  with a Python activation memory (one-cycle reads, lane-masked writes) holding the input
  tensor; every write is recorded and applied, and the output tensor is compared exactly
  with the integer reference (:mod:`pytorch_ref.reference`).
"""
import gc
import warnings

import numpy as np
import pytest
import torch
from amaranth import Elaboratable, Module
from amaranth.hdl import UnusedElaboratable
from amaranth.lib import wiring

from hdl.compiler.program import GemmOp, RowStacking, lower
from hdl.compiler.widths import Widths, bits_for
from hdl.config import AcceleratorConfig
from hdl.gateware.gemm_engine import GemmEngine
from hdl.gateware.step_generator import StepGenerator, gemm_params, gemm_params_layout
from hdl.compiler import weight_packing
from hdl.gateware.weight_memory import WeightMemory
from hdl.host import pack_input
from pytorch_ref.ir import integer_semantics as sem
from pytorch_ref.ir.quantized_model import (Conv2dLayer, DenseLayer, FlattenLayer, QuantizedModel, QuantParams,
                                            Requantization)
from pytorch_ref.reference import run_integer_reference, run_layer
from tests.component_sim import ReadLatency, random_array, run_bench, read_tensor


# --- WeightMemory ---------------------------------------------------------------------------

@pytest.mark.parametrize("rows, cols, tiles, seed", [(2, 3, 5, 0), (3, 2, 11, 1), (4, 4, 20, 2), (1, 1, 7, 3),
                                                     (1, 4, 9, 4), (3, 1, 16, 5), (2, 2, 9000, 6)])
def test_weight_memory_delivers_tiles_in_diagonal_skew(rows, cols, tiles, seed):
    """Random addresses, each PE checked against its tile. 9,000 tiles: banks of several
    block RAMs by depth, selected over two stages (the 2x2's middle bank: 9 pieces, in 3
    groups of up to 4)."""
    rng = np.random.default_rng(seed)
    rom = rng.integers(-128, 128, (tiles, rows, cols)).astype(np.int8)
    # One spare address bit: the ROM is only ever addressed below ``tiles``.
    dut = WeightMemory(rom, bits_for(tiles - 1) + 1)
    cycles = 120
    # Random addresses, with runs of one address and the first and last tiles included.
    addrs = [int(a) for a in rng.integers(0, tiles, cycles)]
    addrs[10:14] = [0] * 4
    addrs[30:33] = [tiles - 1] * 3
    fill = rows + cols - 2 + WeightMemory.LATENCY          # the deepest PE's delay
    checked = []

    async def bench(ctx):
        for n, addr in enumerate(addrs):
            ctx.set(dut.addr, addr)
            # The weights are registers: what is seen now was settled by the last edge.
            seen = ctx.get(dut.weights)
            if n >= fill:
                for r in range(rows):
                    for c in range(cols):
                        source = n - (r + c + WeightMemory.LATENCY)
                        want = int(rom[addrs[source], r, c])
                        got = int(seen[r][c])
                        assert got == want, (f"cycle {n}, PE ({r}, {c}): expected tile {addrs[source]} "
                                             f"(addressed at cycle {source}) = {want}, got {got}")
                checked.append(n)
            await ctx.tick()

    run_bench(dut, bench)
    assert len(checked) == cycles - fill


@pytest.mark.parametrize("rows, cols, formats, seed", [(2, 3, (8, 4, 2), 0), (3, 2, (2, 3, 5), 1), (1, 1, (4,), 2),
                                                       (4, 4, (7, 8, 4, 2, 6), 3)])
def test_weight_memory_unpacks_mixed_widths(rows, cols, formats, seed):
    """Regions of ``b``-bit tiles packed as the lowering packs them; random tile addresses
    and widths every cycle, each PE checked against the tile before packing."""
    rng = np.random.default_rng(seed)
    regions, words = [], []                      # (bits, first tile address, tiles)
    for bits in formats:
        low, high = sem.weight_range(bits)
        tiles = rng.integers(low, high + 1, (int(rng.integers(1, 9)), rows, cols))
        tiles[0, 0, 0], tiles[-1, -1, -1] = low, high
        regions.append((bits, weight_packing.tile_address(sum(map(len, words)), bits), tiles))
        words.append(weight_packing.pack_tiles(tiles, bits))
    words = np.concatenate(words)
    addr_bits = bits_for(max(base + len(tiles) for _, base, tiles in regions))
    dut = WeightMemory(words, addr_bits, formats)
    cycles = 100
    picks = [(regions[k], int(rng.integers(0, len(regions[k][2])))) for k in rng.integers(0, len(regions), cycles)]
    fill = rows + cols - 2 + WeightMemory.LATENCY
    checked = []

    async def bench(ctx):
        for n, ((bits, base, _), index) in enumerate(picks):
            ctx.set(dut.addr, base + index)
            ctx.set(dut.bits, bits)
            seen = ctx.get(dut.weights)
            if n >= fill:
                for r in range(rows):
                    for c in range(cols):
                        (_, _, tiles), index = picks[n - (r + c + WeightMemory.LATENCY)]
                        assert int(seen[r][c]) == int(tiles[index, r, c]), (n, r, c)
                checked.append(n)
            await ctx.tick()

    run_bench(dut, bench)
    assert len(checked) == cycles - fill


def test_packing_round_trips_and_refuses_wide_codes():
    rng = np.random.default_rng(7)
    for bits in range(2, 9):
        low, high = sem.weight_range(bits)
        tiles = rng.integers(low, high + 1, (9, 3, 2))
        words = weight_packing.pack_tiles(tiles, bits)
        assert len(words) == -(-9 // weight_packing.tiles_per_word(bits))
        assert all((weight_packing.unpack_tile(words, t, bits) == tiles[t]).all() for t in range(9))
    assert [weight_packing.tiles_per_word(b) for b in range(2, 9)] == [4, 2, 2, 1, 1, 1, 1]
    with pytest.raises(ValueError, match=r"^4-bit weights must be in \[-8, 7\], not \[-9, 0\]$"):
        weight_packing.pack_tiles(np.array([[[-9, 0]]]), 4)


def test_weight_memory_rejects_empty_or_flat_tiles():
    with warnings.catch_warnings():
        # The rejected components are never elaborated, which Amaranth warns about when
        # they are collected.
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match="non-empty"):
            WeightMemory(np.zeros((0, 2, 2), np.int8), 1)
        with pytest.raises(ValueError, match="non-empty"):
            WeightMemory(np.zeros((4, 4), np.int8), 2)
        gc.collect()


# --- GemmEngine -----------------------------------------------------------------------------

def _requant(rng, n: int, acc_scale: float, zero_point: int, clamp_min: int, clamp_max: int = 127):
    """Random multipliers in ``[2**30, 2**31)``; shifts that bring accumulators of about
    ``acc_scale`` to about 60 codes, so that outputs spread over int8 and some clamp."""
    base = 31 + max(0, int(np.round(np.log2(max(acc_scale, 1.0) / 60.0))))
    shift = np.clip(base + rng.integers(-1, 2, n), sem.SHIFT_MIN, sem.SHIFT_MAX).astype(np.int64)
    multiplier = rng.integers(2 ** 30, 2 ** 31, n).astype(np.int64)
    return Requantization(multiplier, shift, zero_point, clamp_min, clamp_max)


def _weighted(rng, cls, name, weight_shape, zp_in, **kwargs):
    weight = rng.integers(-70, 71, weight_shape).astype(np.int8)
    n = weight_shape[0]
    fan_in = int(np.prod(weight_shape[1:]))
    acc_scale = np.sqrt(fan_in) * 40 * 75                  # |w| ~ 40, |x - zp| ~ 75
    rq = _requant(rng, n, acc_scale, zero_point=int(rng.integers(-10, 10)), clamp_min=-120, clamp_max=118)
    bias = rng.integers(-3000, 3001, n).astype(np.int32)
    return cls(name, weight, bias, QuantParams(0.05, zp_in), QuantParams(0.1, rq.zero_point), rq, **kwargs)


def conv_dense_program(rows, cols):
    """A 3x3 convolution (padding (1, 2), stride (2, 1), input zero point 7) on 5 channels,
    5 outputs, then flatten and a dense layer (a full-image kernel) to 4 outputs, with
    input zero point -9; batch 2, accumulators of 5 over 2 x 12 pixels. The input's rows
    are not stacked (``test_row_stacked_conv_matches_reference`` stacks them)."""
    rng = np.random.default_rng(40 + 10 * rows + cols)
    conv = _weighted(rng, Conv2dLayer, "conv", (5, 5, 3, 3), 7, stride=(2, 1), padding=(1, 2))
    fc = _weighted(rng, DenseLayer, "fc", (4, 5 * 3 * 4), -9)
    model = QuantizedModel("conv_dense", (5, 5, 2), QuantParams(0.05, 7), (conv, FlattenLayer("flat"), fc))
    config = AcceleratorConfig(rows=rows, cols=cols, accumulator_depth=5, input_bus_bits=64)
    return lower(model, config, batch=2, stack_input_rows=False), model


def dense_program(rows, cols, batch, depth):
    """One dense layer, 11 inputs to 7 outputs, input zero point -4."""
    rng = np.random.default_rng(70 + 10 * rows + cols + batch)
    fc = _weighted(rng, DenseLayer, "fc", (7, 11), -4)
    model = QuantizedModel("dense", (11,), QuantParams(0.05, -4), (fc,))
    config = AcceleratorConfig(rows=rows, cols=cols, accumulator_depth=depth, input_bus_bits=64)
    return lower(model, config, batch=batch), model


class _StepsAndEngine(Elaboratable):
    """A StepGenerator feeding a GemmEngine, connected as the top level connects them."""

    def __init__(self, program):
        cfg = program.config
        widths = Widths.of(program)
        self.widths = widths
        self.gen = StepGenerator(widths, cfg, folding=any(op.folded for op in program.gemm_ops))
        self.gemm = GemmEngine(program, widths)

    def elaborate(self, platform):
        m = Module()
        m.submodules.gen = self.gen
        m.submodules.gemm = self.gemm
        wiring.connect(m, self.gen.steps, self.gemm.steps)
        return m


def _input_words(program, codes, bank):
    """The loader's words: ``pack_input``'s beats split into ``[words, bank]`` lanes."""
    words = []
    per_beat = program.words_per_beat
    for beat in pack_input(program, codes):
        raw = beat.to_bytes(per_beat * bank, "little")
        for w in range(per_beat):
            words.append([int(v) for v in np.frombuffer(raw[w * bank:(w + 1) * bank], np.int8)])
    return words[:program.input.words]


def _run_gemm_ops(program, mem, record_steps=None):
    """Runs the program's GEMM ops in order on one StepGenerator + GemmEngine, on the
    memory model ``mem`` (modified in place). Returns, per op, the memory before it, the
    writes ``(cycle, addr, data, lanes)`` and the cycles of its steps with ``last`` set.
    ``record_steps``: a list that receives every step's payload, in order."""
    bank = program.config.bank_width
    dut = _StepsAndEngine(program)
    gen, gemm = dut.gen, dut.gemm
    layout = gemm_params_layout(dut.widths, program.config)
    latency = gemm.write_latency
    results = []

    async def bench(ctx):
        delay_read = ReadLatency([0] * (2 * bank))
        for op in program.gemm_ops:
            before = [list(w) for w in mem]
            ctx.set(gen.params, layout.const(gemm_params(op, program.config)))
            ctx.set(gemm.zero_point, op.input_zero_point)
            await ctx.tick()
            assert not ctx.get(gen.busy) and not ctx.get(gemm.write.valid)
            ctx.set(gen.start, 1)
            writes, steps, last_steps = [], [], []
            cycle, idle = 0, 0
            # Until the generator is idle and the pipeline has had ample time to drain.
            while idle < latency + 12:
                if ctx.get(gemm.steps.valid):
                    step = ctx.get(gemm.steps.payload)
                    steps.append(cycle)
                    if record_steps is not None:
                        record_steps.append(step)
                    if step.last:
                        last_steps.append(cycle)
                    if not step.pad and step.row_lo < step.row_hi:
                        last_word = step.act_addr + (step.lane + step.row_hi - 1) // bank
                        assert last_word < len(mem), f"{op.name}: step reads word {last_word}"
                addr = ctx.get(gemm.read.addr)
                write = None
                if ctx.get(gemm.write.valid):
                    payload = ctx.get(gemm.write.payload)
                    write = (cycle, payload.addr, [int(v) for v in payload.data], payload.lanes)
                    writes.append(write)
                await ctx.tick()
                ctx.set(gen.start, 0)
                ctx.set(gemm.read.data, delay_read(_memory_edge(mem, addr, write, op.name)))
                idle = idle + 1 if not ctx.get(gen.busy) else 0
                cycle += 1
                assert cycle < op.steps + latency + 60, f"{op.name}: busy never fell"
            results.append((op, before, writes, steps, last_steps))

    run_bench(dut, bench)
    return results, latency


def _memory_edge(mem, addr, write, name):
    """A clock edge of the activation memory model: the old words at ``addr`` and ``addr +
    1`` (the GEMM's read), then the write ``(cycle, addr, data, lanes)`` (or None) applied
    lane by lane."""
    bank = len(mem[0])
    data = [v for a in (addr, addr + 1) for v in (mem[a] if a < len(mem) else [0] * bank)]
    if write is not None:
        _, waddr, wdata, lanes = write
        for lane in range(len(wdata)):              # one word, or two (packed outputs)
            if lanes >> lane & 1:
                assert waddr + lane // bank < len(mem), f"{name}: write past the memory"
                mem[waddr + lane // bank][lane % bank] = wdata[lane]
    return data


def _replay_steps(program, mem, steps, gaps):
    """Feeds recorded ``steps`` to a bare GemmEngine, ``gaps[i]`` idle cycles after step
    ``i``, on the memory model ``mem`` (modified in place); returns its writes
    ``(addr, data, lanes)``."""
    op, = program.gemm_ops
    engine = GemmEngine(program, Widths.of(program))
    schedule = [s for step, gap in zip(steps, gaps) for s in [step] + [None] * gap]
    writes = []

    async def bench(ctx):
        delay_read = ReadLatency([0] * (2 * program.config.bank_width))
        ctx.set(engine.zero_point, op.input_zero_point)
        for cycle in range(len(schedule) + engine.write_latency + 12):
            step = schedule[cycle] if cycle < len(schedule) else None
            ctx.set(engine.steps.valid, step is not None)
            if step is not None:
                ctx.set(engine.steps.payload, step)
            write = None
            if ctx.get(engine.write.valid):
                payload = ctx.get(engine.write.payload)
                write = (cycle, payload.addr, [int(v) for v in payload.data], payload.lanes)
                writes.append(write[1:])
            addr = ctx.get(engine.read.addr)
            await ctx.tick()
            ctx.set(engine.read.data, delay_read(_memory_edge(mem, addr, write, op.name)))

    run_bench(engine, bench)
    return writes


def test_accumulation_forwards_the_latest_write_across_idle_cycles():
    """Batch-1 dense steps add into one accumulator every step. Replayed to the engine with
    idle cycles between them (0, 1, 2 or 3), a step's addend is the latest write that its
    accumulator read (ahead of the sum) did not see, and never a register of a write that did
    not happen (an idle cycle's): the step two before it when the one before was idle, and
    what the read saw after longer gaps. The writes are those of the step generator's run
    without gaps, and the op's output is the reference's. (Only this test fails when the
    forwarding ignores whether the held write happened.)"""
    program, model = dense_program(2, 4, 1, 4)
    op, = program.gemm_ops
    assert op.block == 1 and op.split == 1 and op.channel_tiles == 6
    bank = program.config.bank_width
    rng = np.random.default_rng(17)
    mem = [[int(v) for v in rng.integers(-128, 128, bank)] for _ in range(program.activation_words)]
    steps, generated = [], [list(w) for w in mem]
    (_, _, writes, _, _), = _run_gemm_ops(program, generated, record_steps=steps)[0]
    gaps = [(0, 1, 0, 0, 2, 3, 1, 1, 0, 2)[i % 10] for i in range(len(steps))]
    replayed = [list(w) for w in mem]
    assert _replay_steps(program, replayed, steps, gaps) == [w[1:] for w in writes]
    assert replayed == generated
    source = torch.as_tensor(read_tensor(mem, op.source, bank), dtype=torch.int8).reshape(1, -1)
    want = run_layer(model.layers[0], source).numpy().astype(np.int64)
    np.testing.assert_array_equal(read_tensor(replayed, op.dest, bank).reshape(want.shape), want)


def _check_op_writes(program, op: GemmOp, before, after, writes, steps, last_steps, latency):
    cfg = program.config
    bank, cols = cfg.bank_width, cfg.cols
    dst = op.dest
    # One step a cycle, all of them.
    assert len(steps) == op.steps and steps == list(range(steps[0], steps[0] + op.steps)), f"{op.name}: steps"
    # Each lane of the n tiles' groups of each output pixel written exactly once.
    counts = {}
    for _, addr, data, lanes in writes:
        for lane in range(len(data)):
            if lanes >> lane & 1:
                word = addr + lane // bank
                assert dst.base <= word < dst.base + dst.words, f"{op.name}: write to word {word} outside {dst}"
                counts[word, lane % bank] = counts.get((word, lane % bank), 0) + 1
    want = {}
    for pixel in range(dst.pixels):
        if dst.packed_lanes:         # exactly the tensor's elements: its neighbours' lanes untouched
            for channel in range(dst.channels):
                element = dst.base * bank + pixel * dst.channels + channel
                want[element // bank, element % bank] = 1
            continue
        for channel in range(op.n_tiles * (cols // op.split)):     # a tile writes cols / split outputs
            want[dst.base + pixel * dst.words_per_pixel + channel // bank, channel % bank] = 1
    assert counts == want, f"{op.name}: lanes written (count != 1 or missing): " \
                           f"{sorted(set(counts.items()) ^ set(want.items()))[:8]}"
    # Words outside the destination keep their contents.
    assert all(after[a] == before[a] for a in range(len(before)) if not dst.base <= a < dst.base + dst.words)
    # Lanes of padded output channels (no weights, bias 0, multiplier 0): the zero point, clamped.
    p = op.param_base
    pad_code = int(sem.requantize_half_up(np.zeros(1, np.int64), np.zeros(1, np.int64), np.ones(1, np.int64),
                                          int(program.zero_point[p]), int(program.clamp_min[p]),
                                          int(program.clamp_max[p]))[0])
    for (addr, lane) in want:
        channel = ((addr - dst.base) % dst.words_per_pixel) * bank + lane
        if not dst.packed_lanes and channel >= dst.channels:
            assert after[addr][lane] == pad_code, f"{op.name}: padded channel {channel} at word {addr}"
    # Every write comes exactly ``write_latency`` cycles after a step that ends a pass, in order.
    assert [c for c, _, _, _ in writes] == [c + latency for c in last_steps], f"{op.name}: write timing"
    assert writes[-1][0] - steps[-1] <= latency


def _check_program(program, model, seed, codes=None, spread=True):
    """Runs every GEMM op of ``program`` on random int8 input codes (or ``codes``) and
    checks each op's writes and output, and the program's output."""
    bank = program.config.bank_width
    rng = np.random.default_rng(seed)
    if codes is None:
        codes = rng.integers(-128, 128, (program.batch,) + tuple(model.input_shape)).astype(np.int8)
        codes.flat[:min(4, codes.size)] = [-128, 127, -128, 127][:min(4, codes.size)]
    # Random words everywhere (the engine must not depend on unused lanes), then the input.
    mem = [[int(v) for v in rng.integers(-128, 128, bank)] for _ in range(program.activation_words)]
    src = program.input
    words = _input_words(program, codes, bank)
    assert len(words) == src.words
    for index, word in enumerate(words):
        for lane, value in enumerate(word):
            # Lanes past the input channels: junk (their weights are zero).
            if (index * bank + lane < src.pixels * src.channels if src.packed_lanes
                    else (index % src.words_per_pixel) * bank + lane < src.channels):
                mem[src.base + index][lane] = value
    results, latency = _run_gemm_ops(program, mem)
    assert [r[0] for r in results] == program.gemm_ops

    # Per op: its writes, and its output against the reference layer on the same source.
    layers = {layer.name: layer for layer in model.layers}
    shapes = dict(zip([layer.name for layer in model.layers], model.shapes[:-1]))
    for index, (op, before, writes, steps, last_steps) in enumerate(results):
        after = results[index + 1][1] if index + 1 < len(results) else mem
        _check_op_writes(program, op, before, after, writes, steps, last_steps, latency)
        layer = layers[op.name]
        if op.source == program.input and program.input_stacking:
            # Its source in memory has the input's rows stacked; the layer takes the input.
            source = torch.as_tensor(codes).reshape((program.batch,) + tuple(model.input_shape))
        else:
            source = torch.as_tensor(read_tensor(before, op.source, bank), dtype=torch.int8)
            source = source.reshape((op.source.images,) + tuple(shapes[op.name]) if isinstance(layer, Conv2dLayer)
                                    else (op.source.images, -1))
        want = run_layer(layer, source).numpy().astype(np.int64)
        got = read_tensor(after, op.dest, bank).reshape(want.shape)
        np.testing.assert_array_equal(got, want, err_msg=op.name)

    # The whole program against the integer reference on the int8 input.
    reference = run_integer_reference(model, torch.as_tensor(codes), device="cpu").numpy().astype(np.int64)
    got = read_tensor(mem, program.output, bank).reshape(reference.shape)
    np.testing.assert_array_equal(got, reference)
    if spread:
        assert len(np.unique(reference)) > 4       # the requantization does not squash everything


def test_row_stacked_conv_matches_reference():
    """A 2-channel 3x3 convolution (stride 2, padding 1, input zero point 7) on a 4x4 array
    runs on its input with rows stacked: 6 channels and a 1x3 kernel, 5 tiles instead of
    6, vertical padding sent as the zero point; batch 2."""
    rng = np.random.default_rng(77)
    conv = _weighted(rng, Conv2dLayer, "conv", (5, 2, 3, 3), 7, stride=(2, 2), padding=(1, 1))
    model = QuantizedModel("stacked", (2, 9, 9), QuantParams(0.05, 7), (conv,))
    config = AcceleratorConfig(rows=4, cols=4, accumulator_depth=8, input_bus_bits=64)
    program = lower(model, config, batch=2)
    op, = program.gemm_ops
    assert program.input_stacking == RowStacking(kernel_rows=3, stride=2, padding=1, fill=7)
    assert (op.kernel, op.stride, op.padding, op.source.channels, op.source.height) == ((1, 3), (1, 2), (0, 1), 6, 5)
    assert op.folded and op.k_tiles == 5
    assert lower(model, config, batch=2, stack_input_rows=False).gemm_ops[0].k_tiles == 6
    _check_program(program, model, seed=77)


@pytest.mark.parametrize("rows, cols", [(3, 2), (2, 2), (2, 3)])
def test_conv_then_dense_matches_reference(rows, cols):
    program, model = conv_dense_program(rows, cols)
    conv, fc = program.gemm_ops
    # The program exercises what it claims to.
    assert conv.padding == (1, 2) and conv.input_zero_point == 7 and fc.input_zero_point == -9
    assert conv.channel_tiles > 1 and conv.n_tiles > 1 and fc.channel_tiles > 1 and fc.n_tiles > 1
    assert conv.block == 5 and conv.pixels == 24 and conv.pixels % conv.block
    assert fc.kernel == (3, 4) and fc.pixels == 2
    # The dense layer folds (its 5 channels fit no tile), so the convolution writes its
    # output packed: n tiles of cols lanes from any lane on, the last one cut at 5 channels.
    assert fc.folded and conv.dest.packed_lanes and program.config.bank_width % conv.dest.channels
    _check_program(program, model, seed=rows * 10 + cols)


@pytest.mark.parametrize("rows, cols", [(4, 4), (8, 4), (4, 2), (3, 2)])
def test_folded_conv_then_dense_matches_reference(rows, cols):
    """5 channels and a 3x3 kernel fold on 3 (6-lane words), 4 and 8 rows: each kernel row's 15 values in
    tiles that straddle taps and words, with the padding (1, 2) masking rows."""
    program, model = conv_dense_program(rows, cols)
    conv, fc = program.gemm_ops
    assert conv.folded and fc.folded and conv.source.packed_lanes and conv.dest.packed_lanes
    assert conv.k_tiles == 3 * -(-15 // rows) < 9 * conv.channel_tiles
    _check_program(program, model, seed=rows * 10 + cols)


@pytest.mark.parametrize("rows, cols, batch, depth, split", [(2, 3, 3, 2, 3), (3, 2, 1, 4, 2), (2, 2, 2, 1, 2),
                                                              (4, 4, 2, 2, 1)])
def test_dense_matches_reference(rows, cols, batch, depth, split):
    """Batches over several blocks, and batch 1: the same accumulator every cycle. Seven
    outputs on 2 or 3 columns split their reduction (see :mod:`hdl.compiler.program`)."""
    program, model = dense_program(rows, cols, batch, depth)
    op, = program.gemm_ops
    assert op.channel_tiles > 1 and op.n_tiles > 1 and op.input_zero_point == -4
    assert op.block == min(batch, depth) and op.split == split
    _check_program(program, model, seed=100 + batch)


def test_split_then_whole_ops_match_reference():
    """A split 1x1 convolution (reads past its pixels' words, whose weights are zero), then
    a whole 1x1 convolution and a dense layer after a flatten, through the adding stage."""
    from tests.test_window_and_steps import program_split
    program, model = program_split()
    assert [op.split for op in program.gemm_ops] == [2, 1, 1]
    _check_program(program, model, seed=5, spread=False)


def test_only_split_programs_have_the_adding_stage():
    """The adding stage costs a cycle of latency (which the write timing above checks
    against the hardware), and only programs with split ops have it."""
    from tests.test_window_and_steps import program_split
    program, model = program_split()
    whole = lower(model, program.config, batch=2, split_reductions="never")
    assert [GemmEngine.split_latency_for(p) for p in (program, whole)] == [1, 0]


def _random_conv_program(seed, folded=False):
    """A random convolution on a random array shape (rows 3 with cols 4 makes 12-lane
    words: 4 channel groups and 3 output groups a word), random accumulator depth, batch
    and input zero point, kept under 1,200 steps; with ``folded``, one that folds."""
    rng = np.random.default_rng((1900 if folded else 900) + seed)
    while True:
        rows, cols = random_array(rng, folded)
        c_in, c_out = int(rng.integers(1, 4 if folded else 8)), int(rng.integers(1, 8))
        h, w = int(rng.integers(2, 6)), int(rng.integers(2, 6))
        kernel = (int(rng.integers(1, 4)), int(rng.integers(1, 6 if folded else 4)))
        stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        padding = (int(rng.integers(0, kernel[0] + 1)), int(rng.integers(0, kernel[1] + 1)))
        if h + 2 * padding[0] < kernel[0] or w + 2 * padding[1] < kernel[1]:
            continue
        zp = int(rng.integers(-20, 21))
        conv = _weighted(rng, Conv2dLayer, "conv", (c_out, c_in) + kernel, zp, stride=stride, padding=padding)
        model = QuantizedModel("random", (c_in, h, w), QuantParams(0.05, zp), (conv,))
        config = AcceleratorConfig(rows=rows, cols=cols, accumulator_depth=int(rng.integers(1, 9)))
        program = lower(model, config, batch=int(rng.integers(1, 3)))
        if program.ops[0].steps <= 1200 and program.ops[0].folded == folded:
            return program, model


@pytest.mark.parametrize("folded", [False, True], ids=["unfolded", "folded"])
@pytest.mark.parametrize("seed", range(8))
def test_random_conv_matches_reference(seed, folded):
    program, model = _random_conv_program(seed, folded)
    _check_program(program, model, seed=seed, spread=False)


def test_tight_accumulator_at_both_extremes():
    """Accumulators exactly as wide as lowering proves necessary, and inputs that reach
    both ends of every output's range (image 2n the greatest sum of output n, image 2n + 1
    the least): sign extension of the bias ROM, the array and the accumulator memory at
    the limit, and the limit reached."""
    rng = np.random.default_rng(5)
    weight = rng.choice([-127, -126, 127, 126, 0], (5, 9)).astype(np.int8)
    zp = 3
    bias = rng.integers(-20000, 20001, 5).astype(np.int32)
    fan_bound = float(np.abs(weight.astype(np.int64)).sum(axis=1).max() * 128)
    rq = _requant(rng, 5, fan_bound / 2, zero_point=0, clamp_min=-128)
    fc = DenseLayer("fc", weight, bias, QuantParams(0.05, zp), QuantParams(0.1, 0), rq)
    model = QuantizedModel("tight", (9,), QuantParams(0.05, zp), (fc,))
    need = lower(model, AcceleratorConfig(rows=2, cols=2)).accumulator_bits_needed
    assert need > 17
    config = AcceleratorConfig(rows=2, cols=2, accumulator_depth=3, accumulator_bits=need, input_bus_bits=64)
    program = lower(model, config, batch=10)
    with pytest.raises(ValueError, match="accumulator bits"):
        lower(model, AcceleratorConfig(rows=2, cols=2, accumulator_bits=need - 1))
    codes = np.stack([np.where(weight[n] > 0, hi, lo) for n in range(5) for hi, lo in ((127, -128), (-128, 127))])
    codes = codes.astype(np.int8)
    # The sums the hardware forms (raw codes, the zero point folded into the bias) need
    # all ``need`` bits.
    sums = codes.astype(np.int64) @ weight.T.astype(np.int64) + program.bias.reshape(-1)[:5]
    assert max(sem.signed_bits(v, v) for v in sums.flat) == need
    _check_program(program, model, seed=7, codes=codes, spread=False)
