"""``WindowAddress`` and ``StepGenerator`` on Amaranth's simulator, against Python models.

The models are written from the documented semantics (window formula, channels-last
memory layout and the GEMM loop nest of :mod:`hdl.compiler.program`), as plain nested
loops, not from the counters of the gateware.
"""
import numpy as np
import pytest

from hdl.compiler.program import lower
from hdl.compiler.widths import Widths, bits_for
from hdl.config import AcceleratorConfig
from hdl.gateware.step_generator import StepGenerator, gemm_params, gemm_params_layout
from hdl.gateware.window import WindowAddress, tap_layout, window_layout
from pytorch_ref.ir.quantized_model import (Conv2dLayer, DenseLayer, FlattenLayer, MaxPool2dLayer, QuantizedModel,
                                            QuantParams, Requantization)
from tests.component_sim import random_array, run_bench

STEP_FIELDS = ("act_addr", "lane", "row_lo", "row_hi", "pad", "w_addr", "w_bits", "first", "last", "acc_addr", "p_addr",
               "out_addr", "out_lane", "out_count", "split")


# --- WindowAddress ------------------------------------------------------------------------

def _random_geometry(rng):
    while True:
        g = {"in_h": int(rng.integers(1, 7)), "in_w": int(rng.integers(1, 7)), "in_cw": int(rng.integers(1, 4)),
             "kh": int(rng.integers(1, 5)), "kw": int(rng.integers(1, 5)), "sh": int(rng.integers(1, 4)),
             "sw": int(rng.integers(1, 4)), "ph": int(rng.integers(0, 4)), "pw": int(rng.integers(0, 4))}
        out_h = (g["in_h"] + 2 * g["ph"] - g["kh"]) // g["sh"] + 1
        out_w = (g["in_w"] + 2 * g["pw"] - g["kw"]) // g["sw"] + 1
        if out_h >= 1 and out_w >= 1:
            break
    g |= {"out_h": out_h, "out_w": out_w, "in_pixels": g["in_h"] * g["in_w"],
          "in_base": int(rng.integers(0, 60)), "images": int(rng.integers(1, 4))}
    return g


def _tight_widths(g) -> Widths:
    """The widths :meth:`Widths.of` would give a program with this one window op."""
    coords = [g[k] for k in ("in_h", "in_w", "in_cw", "kh", "kw", "sh", "sw", "ph", "pw", "out_h", "out_w")]
    pixels = [g["images"] * g["in_pixels"], g["images"] * g["out_h"] * g["out_w"]]
    words = g["in_base"] + g["images"] * g["in_pixels"] * g["in_cw"]
    return Widths(act_addr=bits_for(words), act_element=bits_for(words * 16), weight_addr=4,
                  param_addr=4, coord=bits_for(max(coords)) + 1, pixel=bits_for(max(pixels)) + 1, acc_addr=4, tile=4)


def _window_model(g, tap):
    """(addr, pad) of one tap, from the documented formula."""
    iy = tap["oy"] * g["sh"] + tap["i"] - g["ph"]
    ix = tap["ox"] * g["sw"] + tap["j"] - g["pw"]
    if not (0 <= iy < g["in_h"] and 0 <= ix < g["in_w"]):
        return 0, 1
    return g["in_base"] + (tap["image_base"] + iy * g["in_w"] + ix) * g["in_cw"] + tap["word"], 0


@pytest.mark.parametrize("seed", range(25))
def test_window_address_matches_formula(seed):
    rng = np.random.default_rng(100 + seed)
    g = _random_geometry(rng)
    w = _tight_widths(g)
    # Every corner of the tap space, then random taps.
    taps = []
    for oy in {0, g["out_h"] - 1}:
        for ox in {0, g["out_w"] - 1}:
            for i in {0, g["kh"] - 1}:
                for j in {0, g["kw"] - 1}:
                    taps.append({"oy": oy, "ox": ox, "i": i, "j": j, "image_base": (g["images"] - 1) * g["in_pixels"],
                                 "word": g["in_cw"] - 1})
    for _ in range(60):
        taps.append({"oy": int(rng.integers(g["out_h"])), "ox": int(rng.integers(g["out_w"])),
                     "i": int(rng.integers(g["kh"])), "j": int(rng.integers(g["kw"])),
                     "image_base": int(rng.integers(g["images"])) * g["in_pixels"],
                     "word": int(rng.integers(g["in_cw"]))})
    expected = [_window_model(g, t) for t in taps]
    dut = WindowAddress(w)
    window = window_layout(w).const({k: g[k] for k in window_layout(w).members})
    layout = tap_layout(w)
    latency = WindowAddress.LATENCY

    async def bench(ctx):
        ctx.set(dut.window, window)
        got = []
        for t in range(len(taps) + latency - 1):
            if t < len(taps):
                ctx.set(dut.tap, layout.const(taps[t]))
            await ctx.tick()
            # After this edge the outputs hold the tap set ``latency`` edges ago.
            if t + 1 >= latency:
                got.append((ctx.get(dut.addr), ctx.get(dut.pad)))
        assert len(got) == len(taps)
        for index, (g_, e_) in enumerate(zip(got, expected)):
            assert g_ == e_, f"geometry {g}, tap {taps[index]}: expected {e_}, got {g_}"

    run_bench(dut, bench)


def test_window_latency_is_exact():
    """A tap shows up exactly ``LATENCY`` edges later, not earlier or later."""
    g = {"in_h": 3, "in_w": 3, "in_cw": 1, "kh": 1, "kw": 1, "sh": 1, "sw": 1, "ph": 0, "pw": 0, "out_h": 3,
         "out_w": 3, "in_pixels": 9, "in_base": 5, "images": 1}
    w = _tight_widths(g)
    dut = WindowAddress(w)

    async def bench(ctx):
        ctx.set(dut.window, window_layout(w).const({k: g[k] for k in window_layout(w).members}))
        ctx.set(dut.tap, {"oy": 0, "ox": 0, "i": 0, "j": 0, "image_base": 0, "word": 0})
        # (Until then the pipeline holds its registers' initial values, not taps.)
        for _ in range(WindowAddress.LATENCY):
            await ctx.tick()
        assert ctx.get(dut.addr) == 5
        ctx.set(dut.tap, {"oy": 2, "ox": 1, "i": 0, "j": 0, "image_base": 0, "word": 0})
        seen = []
        for _ in range(WindowAddress.LATENCY):
            await ctx.tick()
            seen.append(ctx.get(dut.addr))
        assert seen == [5] * (WindowAddress.LATENCY - 1) + [5 + 7]

    run_bench(dut, bench)


# --- StepGenerator --------------------------------------------------------------------------

def _requant(n: int) -> Requantization:
    return Requantization(np.full(n, 2 ** 30, dtype=np.int64), np.full(n, 40, dtype=np.int64), 0, -128)


def _conv(rng, name, c_in, c_out, kernel, stride=(1, 1), padding=(0, 0)):
    weight = rng.integers(-5, 6, (c_out, c_in) + tuple(kernel)).astype(np.int8)
    return Conv2dLayer(name, weight, np.zeros(c_out, np.int32), QuantParams(0.1, 2), QuantParams(0.1, 0),
                       _requant(c_out), stride=stride, padding=padding)


def _dense(rng, name, k, n):
    weight = rng.integers(-5, 6, (n, k)).astype(np.int8)
    return DenseLayer(name, weight, np.zeros(n, np.int32), QuantParams(0.1, -1), QuantParams(0.1, 0), _requant(n))


def program_wide_rows():
    """rows=2, cols=4: two channel groups per input word. 6 input channels = 3 channel
    tiles over 2 words; 5 outputs = 2 n tiles; accumulators of 5 for 16-pixel images; a
    strided rectangular conv with asymmetric padding; flatten + dense; a batch of 2."""
    rng = np.random.default_rng(11)
    layers = (_conv(rng, "c1", 6, 5, (3, 3), (1, 1), (1, 1)),
              _conv(rng, "c2", 5, 3, (3, 2), (2, 1), (1, 0)),
              FlattenLayer("flat"),
              _dense(rng, "fc", 18, 7))
    model = QuantizedModel("wide_rows", (6, 4, 4), QuantParams(0.1, 2), layers)
    return lower(model, AcceleratorConfig(rows=2, cols=4, accumulator_depth=5, input_bus_bits=64), batch=2), model


def program_wide_cols():
    """rows=4, cols=2: two output groups per word (5 outputs = 3 n tiles over 2 output
    words); stride 2 with padding; blocks of 4 over 9 pixels; a pool in between; a dense
    layer after flatten (a 2x2 kernel over the whole image), then a plain dense layer."""
    rng = np.random.default_rng(12)
    layers = (_conv(rng, "c1", 3, 5, (3, 3), (2, 2), (1, 1)),
              MaxPool2dLayer("pool", (2, 2), (1, 1)),
              FlattenLayer("flat"),
              _dense(rng, "fc1", 20, 6),
              _dense(rng, "fc2", 6, 3))
    model = QuantizedModel("wide_cols", (3, 5, 5), QuantParams(0.1, 0), layers)
    return lower(model, AcceleratorConfig(rows=4, cols=2, accumulator_depth=4, input_bus_bits=64)), model


def program_split():
    """rows=4, cols=4, ``split_reductions="always"``: a 1x1 convolution of 20 channels to 5
    splits over 2 columns (3 tiles of 2 outputs; 3 reads of 2 words a pixel, the last past
    its 5 words); blocks of 4 over 2 images of 3x3; then a 1x1 convolution of 5 to 3 that
    no split shortens (a whole op after a split one), and a dense layer of 27 to 2 after a
    flatten, which is never split."""
    rng = np.random.default_rng(13)
    layers = (_conv(rng, "c1", 20, 5, (1, 1)), _conv(rng, "c2", 5, 3, (1, 1)), FlattenLayer("flat"),
              _dense(rng, "fc", 27, 2))
    model = QuantizedModel("split", (20, 3, 3), QuantParams(0.1, 2), layers)
    config = AcceleratorConfig(rows=4, cols=4, accumulator_depth=4, input_bus_bits=64)
    return lower(model, config, batch=2, split_reductions="always"), model


def _unfolded_read(op, config, image, oy, ox, i, tap):
    """The read of tap ``(j, ct)``: one pixel's group of ``rows`` lanes, or padding."""
    src, bank, rows = op.source, config.bank_width, config.rows
    j, ct = divmod(tap, op.channel_tiles)
    iy, ix = oy * op.stride[0] + i - op.padding[0], ox * op.stride[1] + j - op.padding[1]
    pad = not (0 <= iy < src.height and 0 <= ix < src.width)
    channel = ct * rows                                      # first channel of the tile
    src_pixel = (image * src.height + iy) * src.width + ix
    return {"act_addr": 0 if pad else src.base + src_pixel * src.words_per_pixel + channel // bank,
            "lane": channel % bank, "row_lo": 0, "row_hi": rows, "pad": int(pad)}


def _folded_read(op, config, image, oy, ox, i, tile):
    """The read of tile ``t`` of kernel row ``i`` from the packed source: ``rows``
    consecutive elements; rows whose tap lies left or right of the input read padding."""
    src, bank, rows, c_in = op.source, config.bank_width, config.rows, op.source.channels
    iy, ix0 = oy * op.stride[0] + i - op.padding[0], ox * op.stride[1] - op.padding[1]
    element = src.base * bank + ((image * src.height + iy) * src.width + ix0) * c_in + tile * rows
    # Taps [left, right) of the kernel row lie inside the input: as rows of this tile,
    def clamp(v):
        return min(max(v, 0), rows)
    left, right = max(0, -ix0), min(op.kernel[1], src.width - ix0)
    lo, hi = clamp(left * c_in - tile * rows), clamp(right * c_in - tile * rows)
    inside = [0 <= ix0 + (tile * rows + r) // c_in < src.width and tile * rows + r < op.kernel[1] * c_in
              for r in range(rows)]
    assert inside == [lo <= r < hi for r in range(rows)], "the bounds say which rows are inside"
    pad = not 0 <= iy < src.height
    return {"act_addr": 0 if pad else element // bank, "lane": element % bank,
            "row_lo": lo, "row_hi": hi, "pad": int(pad)}


def _split_read(op, config, image, oy, ox, i, tap):
    """The read of channel tile ``tap`` of a split op: ``rows * split`` inputs, whole words
    from the pixel's word ``tap * rows * split / bank`` on."""
    src = op.source
    pixel = (image * src.height + oy) * src.width + ox
    word = tap * config.rows * op.split // config.bank_width
    return {"act_addr": src.base + pixel * src.words_per_pixel + word, "lane": 0, "row_lo": 0,
            "row_hi": config.rows, "pad": 0}


def expected_steps(op, config):
    """Every step of ``op``, enumerated from the loop nest of :mod:`hdl.compiler.program`."""
    bank = config.bank_width
    dst = op.dest
    per_tile = config.cols // op.split               # a tile's outputs
    per_image = dst.height * dst.width
    # Output pixels are its channels apart when packed, its words otherwise.
    stride = dst.channels if dst.packed_lanes else dst.words_per_pixel * bank
    read = _folded_read if op.folded else _split_read if op.split > 1 else _unfolded_read
    steps = []
    for nt in range(op.n_tiles):
        for block_start in range(0, op.pixels, op.block):
            block = list(range(block_start, min(block_start + op.block, op.pixels)))
            kt = 0
            for i in range(op.kernel[0]):
                for tap in range(op.taps_per_row):
                    for slot, pixel in enumerate(block):
                        image, rest = divmod(pixel, per_image)
                        oy, ox = divmod(rest, dst.width)
                        steps.append({
                            **read(op, config, image, oy, ox, i, tap),
                            "w_addr": op.weight_base + nt * op.k_tiles + kt, "w_bits": op.weight_bits,
                            "first": int(kt == 0), "last": int(kt == op.k_tiles - 1),
                            "acc_addr": slot, "p_addr": op.param_base + nt,
                            "out_addr": dst.base + (pixel * stride + nt * per_tile) // bank,
                            "out_lane": (pixel * stride + nt * per_tile) % bank,
                            "out_count": min(per_tile, dst.channels - nt * per_tile) if dst.packed_lanes
                            else per_tile,
                            "split": op.split,
                            "_tile": (nt, i, tap),
                        })
                    kt += 1
    return steps


def _check_weight_tiles(program, model, op, steps):
    """The weight addresses of the model name the tiles the lowering stored for
    ``(nt, i, j, ct)``: PE ``(r, c)`` holds ``w[nt*cols + c, ct*rows + r, i, j]``; for
    tile ``t`` of a folded kernel row, ``w[nt*cols + c, ch, i, j]``, ``(j, ch) = divmod(t*rows + r, C)``."""
    cfg = program.config
    layer = next(l for l in model.layers if l.name == op.name)
    src = op.source
    if isinstance(layer, DenseLayer):
        kernel = layer.weight.reshape(layer.out_features, src.channels, *op.kernel)
    else:
        kernel = layer.weight
    if src == program.input and program.input_stacking:
        # Row-stacked input: channel i * C + c of the 1 x kw kernel is channel c of kernel row i.
        n, c_orig, kh, kw = kernel.shape
        stacked = np.zeros((n, kh * c_orig, 1, kw), kernel.dtype)
        for i in range(kh):
            for c in range(c_orig):
                stacked[:, i * c_orig + c, 0, :] = kernel[:, c, i, :]
        kernel = stacked
    n_out, c_in = kernel.shape[:2]
    for step in steps:
        nt, i, tap = step["_tile"]
        tile = program.weight_tile(step["w_addr"], op.weight_bits)
        if op.split > 1:
            # PE (r, c) of a split op: output nt * cols / split + c // split,
            # input (tap * rows + r) * split + c % split.
            for r in range(cfg.rows):
                for c in range(cfg.cols):
                    n, ch = nt * cfg.cols // op.split + c // op.split, (tap * cfg.rows + r) * op.split + c % op.split
                    want = int(kernel[n, ch, 0, 0]) if n < n_out and ch < c_in else 0
                    assert int(tile[r, c]) == want, f"{op.name}: split tile {step['w_addr']} ({nt}, {tap})"
            continue
        for r in range(cfg.rows):
            if op.folded:
                j, ch = divmod(tap * cfg.rows + r, c_in)
            else:
                (j, ct), ch = divmod(tap, op.channel_tiles), None
                ch = ct * cfg.rows + r
            for c in range(cfg.cols):
                n = nt * cfg.cols + c
                want = int(kernel[n, ch, i, j]) if n < n_out and ch < c_in and j < op.kernel[1] else 0
                assert int(tile[r, c]) == want, f"{op.name}: tile {step['w_addr']} ({nt}, {i}, {tap})"


def _run_ops(program, ops, *, restart_pulses=False):
    """Runs ``ops`` one after the other on one StepGenerator; returns each op's steps
    (as dicts), the cycles they came on and the busy trace."""
    cfg = program.config
    widths = Widths.of(program)
    dut = StepGenerator(widths, cfg, folding=any(op.folded for op in program.gemm_ops))
    layout = gemm_params_layout(widths, cfg)
    results = []

    async def bench(ctx):
        for op in ops:
            ctx.set(dut.params, layout.const(gemm_params(op, program.config)))
            await ctx.tick()
            assert not ctx.get(dut.busy) and not ctx.get(dut.steps.valid)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            cycle, steps, cycles, busy_trace = 1, [], [], []
            while True:
                busy, valid = ctx.get(dut.busy), ctx.get(dut.steps.valid)
                busy_trace.append(busy)
                if valid:
                    payload = ctx.get(dut.steps.payload)
                    steps.append({f: getattr(payload, f) for f in STEP_FIELDS})
                    cycles.append(cycle)
                if not busy:
                    break
                if restart_pulses and cycle % 37 == 0 and len(steps) + 8 < op.steps:
                    # Ignored while running (the whole busy period: test_start_is_ignored_for_the_whole_busy_period).
                    ctx.set(dut.start, 1)
                await ctx.tick()
                ctx.set(dut.start, 0)
                cycle += 1
                assert cycle < op.steps + 50, "busy never fell"
            # Idle afterwards: no stray steps.
            for _ in range(8):
                await ctx.tick()
                assert not ctx.get(dut.steps.valid) and not ctx.get(dut.busy)
            results.append((steps, cycles, busy_trace))

    run_bench(dut, bench)
    return results


def _public(step):
    return {k: v for k, v in step.items() if not k.startswith("_")}


def test_split_steps_match_loop_nest():
    """A split op's steps (whole-word reads, tiles of cols / split outputs), then a whole op
    and a dense layer after a flatten on the same generator."""
    program, model = program_split()
    ops = program.gemm_ops
    c1, c2, fc = ops
    assert (c1.split, c1.n_tiles, c1.k_tiles, c1.block, c1.pixels) == (2, 3, 3, 4, 18)
    assert c1.source.words_per_pixel == 5 and (c2.split, fc.split) == (1, 1)
    for op, (steps, cycles, _) in zip(ops, _run_ops(program, ops)):
        want = expected_steps(op, program.config)
        _check_weight_tiles(program, model, op, want)
        assert cycles == list(range(cycles[0], cycles[0] + op.steps)), f"{op.name}: gaps in the steps"
        assert steps == [_public(s) for s in want], op.name


@pytest.mark.parametrize("make_program", [program_wide_rows, program_wide_cols])
def test_step_sequences_match_loop_nest(make_program):
    program, model = make_program()
    ops = program.gemm_ops
    # The programs exercise what they claim to.
    assert any(op.channel_tiles > 1 for op in ops) and any(op.n_tiles > 1 for op in ops)
    assert any(op.block < op.pixels and op.pixels % op.block for op in ops)
    assert any(op.padding != (0, 0) for op in ops) and any(op.stride != (1, 1) for op in ops)
    assert any(op.kernel != (1, 1) and op.dest.height == op.dest.width == 1 for op in ops)   # dense after flatten
    results = _run_ops(program, ops, restart_pulses=True)
    for op, (steps, cycles, busy_trace) in zip(ops, results):
        want = expected_steps(op, program.config)
        _check_weight_tiles(program, model, op, want)
        want = [_public(s) for s in want]
        assert len(want) == op.steps
        assert len(steps) == op.steps, f"{op.name}: {len(steps)} steps, expected {op.steps}"
        # One step every cycle, no gaps; busy covers everything up to the last step.
        assert cycles == list(range(cycles[0], cycles[0] + len(cycles))), f"{op.name}: gaps in the steps"
        assert all(busy_trace[:-1]) and not busy_trace[-1]
        # busy_trace[k] is cycle k + 1; busy is a register: it falls the cycle after the one after the last step.
        assert len(busy_trace) == cycles[-1] + 2
        for index, (got, exp) in enumerate(zip(steps, want)):
            assert got == exp, f"{op.name} step {index}: expected {exp}, got {got}"


def _random_program(seed, folded=False):
    """A random convolution (odd array shapes included: rows 3 with cols 4 makes 12-lane
    words, 4 channel groups and 3 output groups a word), kept under 3000 steps; with
    ``folded``, one the lowering folds (few channels)."""
    rng = np.random.default_rng((2000 if folded else 1000) + seed)
    while True:
        rows, cols = random_array(rng, folded)
        c_in, c_out = int(rng.integers(1, 4 if folded else 10)), int(rng.integers(1, 10))
        h, w = int(rng.integers(2, 6)), int(rng.integers(2, 6))
        kernel = (int(rng.integers(1, 4)), int(rng.integers(1, 6 if folded else 4)))
        stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        padding = (int(rng.integers(0, kernel[0] + 1)), int(rng.integers(0, kernel[1] + 1)))
        if h + 2 * padding[0] < kernel[0] or w + 2 * padding[1] < kernel[1]:
            continue
        layer = _conv(rng, "conv", c_in, c_out, kernel, stride, padding)
        model = QuantizedModel("random", (c_in, h, w), QuantParams(0.1, 2), (layer,))
        config = AcceleratorConfig(rows=rows, cols=cols, accumulator_depth=int(rng.integers(1, 12)))
        program = lower(model, config, batch=int(rng.integers(1, 3)))
        if program.ops[0].steps <= 3000 and program.ops[0].folded == folded:
            return program, model


@pytest.mark.parametrize("folded", [False, True], ids=["unfolded", "folded"])
@pytest.mark.parametrize("seed", range(12))
def test_random_conv_steps_match_loop_nest(seed, folded):
    program, model = _random_program(seed, folded)
    op, = program.ops
    (steps, cycles, busy_trace), = _run_ops(program, [op])
    want = expected_steps(op, program.config)
    _check_weight_tiles(program, model, op, want)
    assert cycles == list(range(cycles[0], cycles[0] + op.steps))
    assert all(busy_trace[:-1]) and not busy_trace[-1]
    for index, (got, exp) in enumerate(zip(steps, want)):
        assert got == _public(exp), f"{op} step {index}"
    assert len(steps) == len(want) == op.steps


def test_step_model_hand_checked():
    """The Python model itself, on hand-worked steps of the first op of the batch-2 program:
    4x4 images, 3x3 kernel, padding 1, 3 channel tiles of 2 over 2 words, blocks of 5."""
    program, _ = program_wide_rows()
    op = program.gemm_ops[0]
    src, dst = op.source, op.dest
    assert (op.block, op.pixels, op.channel_tiles, op.n_tiles, op.k_tiles) == (5, 32, 3, 2, 27)
    assert src.words_per_pixel == 2 and dst.words_per_pixel == 2
    want = expected_steps(op, program.config)
    # nt 0, block 3 holds pixels 15..19: pixel 15 is the last of image 0, 16 the first of image 1.
    block3 = 3 * op.block * op.k_tiles
    # Centre tap (kt = (1*3 + 1)*3 = 12), pixel 16 (slot 1): input pixel 16 (image 1, (0, 0)).
    s = want[block3 + 12 * op.block + 1]
    assert (s["act_addr"], s["pad"], s["lane"], s["acc_addr"]) == (src.base + 32, 0, 0, 1)
    # The destination is packed (the next layer folds): pixel 16's channel 0 is element
    # 16 * 5 = 80, lane 0 of word 20; all 4 lanes of the tile are channels.
    assert dst.packed_lanes == 4 and dst.channels == 5
    assert (s["out_addr"], s["out_lane"], s["out_count"]) == (dst.base + 20, 0, 4)
    assert s["first"] == 0 and s["last"] == 0
    # ct 1 of the same tap: the same word, lanes 2-3; ct 2: the next word, lanes 0-1.
    assert [want[block3 + (12 + d) * op.block + 1]["act_addr"] - src.base for d in (1, 2)] == [32, 33]
    assert [want[block3 + (12 + d) * op.block + 1]["lane"] for d in (1, 2)] == [2, 0]
    # Tap (0, 0) of pixel 16 lies above image 1: padding, address 0; first of its pass.
    s = want[block3 + 1]
    assert (s["act_addr"], s["pad"], s["first"], s["w_addr"]) == (0, 1, 1, op.weight_base)
    # Tap (2, 2) of pixel 15 (image 0, (3, 3)) lies below: padding. Last kt of the pass.
    s = want[block3 + 26 * op.block]
    assert (s["pad"], s["last"], s["w_addr"], s["acc_addr"]) == (1, 1, op.weight_base + 26, 0)
    # nt 1 starts after 7 blocks of nt 0 (6 of 5 pixels and one of 2): channel 4 of pixel 0,
    # element 4, the next word; its tile has one channel. Pixel 1's is element 9: lane 1.
    s = want[op.k_tiles * op.pixels]
    assert (s["w_addr"], s["p_addr"], s["out_addr"], s["out_lane"], s["out_count"]) == (
        op.weight_base + 27, op.param_base + 1, dst.base + 1, 0, 1)
    s = want[op.k_tiles * op.pixels + 1]
    assert (s["out_addr"], s["out_lane"]) == (dst.base + 2, 1)
    assert len(want) == 2 * 27 * 32


@pytest.mark.parametrize("stages", [0, 2])
@pytest.mark.parametrize("divisor", [1, 3, 6, 8, 12, 20])
def test_divmod_by_constant_is_exact(divisor, stages):
    """Every 11-bit value: the quotient by multiplication and shift, and the remainder;
    pipelined, exactly ``stages`` cycles after the value (a new value every cycle)."""
    from amaranth import ClockDomain, Module, Signal
    from amaranth.sim import Simulator
    from hdl.gateware.window import divmod_by_constant
    m = Module()
    value = Signal(11)
    quotient, remainder = divmod_by_constant(m, value, divisor, stages=stages)
    if stages:
        m.domains.sync = ClockDomain()

    async def bench(ctx):
        values = list(range(1 << 11))
        for n in range(len(values) + stages):
            ctx.set(value, values[n] if n < len(values) else 0)
            if n >= stages:
                x = values[n - stages]
                assert (ctx.get(quotient), ctx.get(remainder)) == divmod(x, divisor), x
            if stages:
                await ctx.tick()

    sim = Simulator(m)
    if stages:
        sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def test_divmod_by_constant_rejects_negative_stages():
    from amaranth import Module, Signal
    from hdl.gateware.window import divmod_by_constant
    with pytest.raises(ValueError, match="a division's stages must be 0 or more, not -1"):
        divmod_by_constant(Module(), Signal(11), 12, stages=-1)


def test_folded_step_model_hand_checked():
    """The model's folded reads, worked by hand: one channel, 3x3 kernel, padding 1, on a
    3x4 input and a 4x4 array (4-lane words)."""
    rng = np.random.default_rng(5)
    model = QuantizedModel("folded", (1, 3, 4), QuantParams(0.1, 2),
                           (_conv(rng, "conv", 1, 2, (3, 3), (1, 1), (1, 1)),))
    program = lower(model, AcceleratorConfig(rows=4, cols=4, accumulator_depth=12))
    op, = program.gemm_ops
    # 3 taps of one channel fill one tile of 4 rows: 3 tiles, not 9.
    assert (op.folded, op.row_tiles, op.k_tiles) == (True, 1, 3)
    # Packed input after guard words: one before (and the left padding's element).
    assert (op.source.packed_lanes, op.source.base, op.source.words) == (4, 2, 3)
    want = expected_steps(op, program.config)
    # Pixel (0, 0), kernel row 1 (input row 0): from element 2*4 - 1 = 7 (word 1, lane 3);
    # row 0 is the left padding, rows 1-2 are pixels (0, 0) and (0, 1), row 3 is no tap.
    s = want[1 * op.block + 0]
    assert (s["act_addr"], s["lane"], s["row_lo"], s["row_hi"], s["pad"]) == (1, 3, 1, 3, 0)
    # Pixel (1, 3), kernel row 2 (input row 2): elements 8 + 2*4 + 2 = 18 on: lane 2 of
    # word 4; rows 0-1 are pixels (2, 2) and (2, 3), row 2 the right padding.
    s = want[2 * op.block + 7]
    assert (s["act_addr"], s["lane"], s["row_lo"], s["row_hi"], s["pad"]) == (4, 2, 0, 2, 0)
    # Pixel (0, 1), kernel row 0: above the input.
    s = want[0 * op.block + 1]
    assert (s["act_addr"], s["pad"]) == (0, 1)


def test_start_is_ignored_for_the_whole_busy_period():
    program, _ = program_wide_cols()
    op = program.gemm_ops[-1]                           # the plain dense layer: a few steps
    cfg = program.config
    widths = Widths.of(program)
    dut = StepGenerator(widths, cfg, folding=any(op.folded for op in program.gemm_ops))

    async def bench(ctx):
        ctx.set(dut.params, gemm_params_layout(widths, program.config).const(gemm_params(op, program.config)))
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        steps = 0
        for _ in range(op.steps + 40):
            steps += ctx.get(dut.steps.valid)
            # Keep pulsing start for as long as busy is high.
            ctx.set(dut.start, ctx.get(dut.busy))
            await ctx.tick()
        assert steps == op.steps

    run_bench(dut, bench)
