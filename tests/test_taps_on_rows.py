"""Depthwise convolutions with their kernel taps on the array's rows (see
:mod:`hdl.compiler.program`): which layers run so, their planar inputs, their weight tiles,
the step generator against a Python model of the documented schedule, and whole
accelerators on all three simulators, exact against the integer reference."""
import numpy as np
import pytest
import torch
from torch import nn

from hdl.compiler.program import READ_WORDS, lower
from hdl.compiler.widths import Widths
from hdl.config import AcceleratorConfig
from hdl.gateware.step_generator import StepGenerator, gemm_params, gemm_params_layout
from hdl.host import tensor_to_words, words_to_tensor
from pytorch_ref.frontends.float_model import quantize_model
from sim.cases import make_case
from tests.component_sim import run_bench


class DepthwiseNet(nn.Module):
    """A pointwise convolution, then two depthwise ones back to back (the first writes the
    second's planar input), then a pointwise one: strides 2 and (1, 2), paddings 1 and
    (1, 0), a 3x3 and a 3x2 kernel, 12 channels."""

    def __init__(self, channels: int = 12):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, channels, 1), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, stride=2, padding=1, groups=channels), nn.ReLU(),
            nn.Conv2d(channels, channels, (3, 2), stride=(1, 2), padding=(1, 0), groups=channels), nn.ReLU(),
            nn.Conv2d(channels, 8, 1))

    def forward(self, x):
        return self.body(x)


INPUT_SHAPE = (3, 9, 10)


def depthwise_model():
    torch.manual_seed(21)
    return quantize_model(DepthwiseNet().eval(), torch.randn(64, *INPUT_SHAPE), name="depthwise_net")


def taps_ops(program):
    return [op for op in program.gemm_ops if op.tap_tiles]


# --- lowering ---------------------------------------------------------------------------

def test_depthwise_layers_run_taps_on_rows_with_planar_inputs():
    model = depthwise_model()
    program = lower(model, AcceleratorConfig(rows=4, cols=4), batch=2)
    ops = {op.name: op for op in program.gemm_ops}
    dw1, dw2 = ops["body.2.Conv2d"], ops["body.4.Conv2d"]
    assert taps_ops(program) == [dw1, dw2]
    # 9 taps on 4 rows: 3 tiles; 6 taps: 2 tiles. 12 channels: 3 words of 4.
    assert (dw1.tap_tiles, dw2.tap_tiles, dw1.n_tiles) == (3, 2, 3)
    # The pointwise convolution writes dw1's input planar, dw1 writes dw2's; dw2 writes
    # the last convolution's input as usual.
    assert ops["body.0.Conv2d"].dest.planar and dw1.source.planar and dw1.dest.planar and dw2.source.planar
    assert not dw2.dest.planar and not program.input.planar and not program.output.planar
    # Cycles: per column, kh pushes for the first pixel, max(sy, tiles) per further pixel,
    # and the last pixel's remaining tiles: 3 words x 2 images x 5 columns x (3 + 4 * 3 + 2).
    assert (dw1.dest.height, dw1.dest.width) == (5, 5)
    assert dw1.steps == 3 * 2 * 5 * (3 + 4 * 3 + 2)
    assert dw1.compute_steps == 3 * 3 * 2 * 25
    # The weight tiles: PE (r, c) of tile (nt, k) holds tap k * rows + r of channel nt * cols + c.
    layer = next(layer for layer in model.layers if layer.name == "body.2.Conv2d")
    taps = layer.weight[:, 0].reshape(12, 9)
    for nt in range(3):
        for k in range(3):
            tile = program.weight_tile(dw1.weight_base + nt * 3 + k, dw1.weight_bits)
            for r in range(4):
                for c in range(4):
                    t = k * 4 + r
                    assert tile[r, c] == (taps[nt * 4 + c, t] if t < 9 else 0), (nt, k, r, c)


def input_depthwise_model():
    """A depthwise convolution straight on the model's input (12 channels: three words on
    4 columns, so the host sends the input planar), then one whose kernel row is wider
    than a read, which runs as a channel-wise op."""
    torch.manual_seed(23)
    return quantize_model(nn.Sequential(nn.Conv2d(12, 12, 3, padding=1, groups=12), nn.ReLU(),
                                        nn.Conv2d(12, 8, 1),
                                        nn.Conv2d(8, 8, (1, READ_WORDS + 1), groups=8)).eval(),
                          torch.randn(16, 12, 6, 9), name="input_depthwise")


def test_where_depthwise_layers_fall_back_to_channel_wise_ops():
    model = depthwise_model()
    # A word of 8 lanes on 4 columns: the columns do not cover a word.
    assert not taps_ops(lower(model, AcceleratorConfig(rows=8, cols=4)))
    # Turned off by the caller.
    assert not taps_ops(lower(model, AcceleratorConfig(rows=4, cols=4), depthwise_taps_on_rows=False))
    # A kernel row wider than a read: a channel-wise op, and its input is not planar.
    program = lower(input_depthwise_model(), AcceleratorConfig(rows=4, cols=4))
    assert [op.name for op in taps_ops(program)] == ["0.Conv2d"]
    assert program.input.planar and not any(op.dest.planar for op in program.ops)


def test_host_sends_a_planar_input_word_plane_by_word_plane():
    program = lower(input_depthwise_model(), AcceleratorConfig(rows=4, cols=4), batch=2)
    placement = program.input
    assert placement.planar and placement.words_per_pixel == 3 and placement.pixels == 2 * 6 * 9
    codes = np.random.default_rng(0).integers(-128, 128, (2, 12, 6, 9)).astype(np.int8)
    words = tensor_to_words(placement, 4, codes)
    # Word g of pixel p at g * pixels + p: channels 4g ... 4g + 3 of that pixel.
    for image, y, x, g in ((0, 0, 0, 0), (1, 5, 8, 2), (0, 3, 4, 1)):
        pixel = (image * 6 + y) * 9 + x
        assert list(words[g * placement.pixels + pixel]) == list(codes[image, 4 * g:4 * g + 4, y, x])
    assert (words_to_tensor(placement, 4, words, (12, 6, 9)) == codes).all()


def test_taps_on_rows_cut_depthwise_cycles_on_8x8():
    """MobileNetV1's first four blocks: each depthwise op takes a third of its
    channel-wise cycles at most (3x3 taps in 2 tiles of 8 rows, instead of 9 steps of one tap),
    strides 1 and 2 alike."""
    from pytorch_ref.zoo.models import mobilenet_v1
    torch.manual_seed(6)
    model = quantize_model(mobilenet_v1(blocks=4).eval(), torch.randn(16, 3, 32, 32), name="mobilenet4")
    config = AcceleratorConfig()
    taps = {op.name: op for op in taps_ops(lower(model, config))}
    diagonal = {op.name: op for op in lower(model, config, depthwise_taps_on_rows=False).gemm_ops
                if op.name in taps}
    assert len(taps) == 5 and set(diagonal) == set(taps)
    for name, op in taps.items():
        assert op.macs == diagonal[name].macs
        assert 3 * op.steps <= diagonal[name].steps, (name, op.steps, diagonal[name].steps)


# --- the step generator -----------------------------------------------------------------

STEP_FIELDS = ("act_addr", "w_addr", "w_bits", "first", "last", "acc_addr", "p_addr", "out_addr", "out_lane",
               "out_count", "taps_on_rows", "push", "push_only", "pad_words", "tap_tile", "depth", "kh", "kw")


def expected_taps_steps(op, config, act_addr_bits: int):
    """Every step of a taps-on-rows op, from the schedule in :mod:`hdl.compiler.program`.
    A push whose words are all padding may read any address (``act_addr`` None)."""
    src, dst = op.source, op.dest
    (kh, kw), (sh, sw), (ph, pw) = op.kernel, op.stride, op.padding
    tiles, period = op.tap_tiles, max(sh, op.tap_tiles)
    steps = []
    for nt in range(op.n_tiles):
        for image in range(dst.images):
            for ox in range(dst.width):
                ix0 = ox * sw - pw
                # Per cycle of the column: the rows pushed, and the tiles computed (output
                # pixel, tile); a pixel's tile 0 comes with its last push, its other tiles
                # right after it, and pixel oy's last push on cycle kh - 1 + oy * period.
                last_push = [kh - 1 + oy * period for oy in range(dst.height)]
                cycles = last_push[-1] + tiles
                pushed_on = list(range(kh)) + [last_push[oy] - sh + 1 + q for oy in range(1, dst.height)
                                               for q in range(sh)]
                computed = {last_push[oy] + k: (oy, k) for oy in range(dst.height) for k in range(tiles)}
                for cycle in range(cycles):
                    push, compute = cycle in pushed_on, cycle in computed
                    step = {"taps_on_rows": 1, "push": int(push), "push_only": int(not compute),
                            "kh": kh, "kw": kw, "w_bits": op.weight_bits, "out_count": config.cols,
                            "out_lane": 0, "acc_addr": 0}
                    if compute:
                        oy, k = computed[cycle]
                        pixel = (image * dst.height + oy) * dst.width + ox
                        out = nt * dst.pixels + pixel if dst.planar else pixel * dst.words_per_pixel + nt
                        depth = sum(last_push[oy] < c <= cycle for c in pushed_on)
                        step |= {"tap_tile": k, "depth": depth, "w_addr": op.weight_base + nt * tiles + k,
                                 "first": int(k == 0), "last": int(k == tiles - 1),
                                 "p_addr": op.param_base + nt, "out_addr": dst.base + out}
                        assert depth + kh <= op.window_depth
                    if push:
                        iy = pushed_on.index(cycle) - ph
                        inside = [0 <= iy < src.height and 0 <= ix0 + j < src.width for j in range(READ_WORDS)]
                        step["pad_words"] = sum((not ok) << j for j, ok in enumerate(inside))
                        if any(inside):
                            word = src.base + nt * src.pixels + (image * src.height + iy) * src.width + ix0
                            step["act_addr"] = word % (1 << act_addr_bits)
                    steps.append(step)
    return steps


def run_taps_op(program, op):
    """The steps the StepGenerator issues for ``op`` (as dicts), and the cycles they came on."""
    widths = Widths.of(program)
    dut = StepGenerator(widths, program.config, taps_on_rows=True)
    steps, cycles = [], []

    async def bench(ctx):
        ctx.set(dut.params, gemm_params_layout(widths, program.config).const(gemm_params(op, program.config)))
        await ctx.tick()
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        cycle = 0
        while ctx.get(dut.busy):
            if ctx.get(dut.steps.valid):
                payload = ctx.get(dut.steps.payload)
                steps.append({f: int(getattr(payload, f)) for f in STEP_FIELDS})
                cycles.append(cycle)
            await ctx.tick()
            cycle += 1
            assert cycle < op.steps + 20, "busy never fell"
        for _ in range(4):
            await ctx.tick()
            assert not ctx.get(dut.steps.valid)

    run_bench(dut, bench)
    return steps, cycles


@pytest.mark.parametrize("config", [AcceleratorConfig(rows=4, cols=4), AcceleratorConfig(rows=3, cols=6),
                                    AcceleratorConfig(rows=8, cols=8)], ids=str)
def test_taps_on_rows_steps_match_the_schedule(config):
    program = lower(depthwise_model(), config, batch=2)
    ops = taps_ops(program)
    assert len(ops) == 2 and ops[0].dest.planar
    for op in ops:
        got, cycles = run_taps_op(program, op)
        want = expected_taps_steps(op, config, Widths.of(program).act_addr)
        assert len(got) == len(want) == op.steps, op.name
        assert cycles == list(range(cycles[0], cycles[0] + len(cycles))), f"{op.name}: gaps in the steps"
        assert sum(1 - s["push_only"] for s in got) == op.compute_steps
        for index, (g, w) in enumerate(zip(got, want)):
            checked = {key: g[key] for key in w}
            assert checked == w, f"{op.name} step {index}"


# --- whole accelerators -------------------------------------------------------------------

@pytest.mark.parametrize("rows, cols, simulator, batch", [
    (4, 4, "verilator", 2), (3, 6, "verilator", 1),
    pytest.param(8, 8, "verilator", 1, marks=pytest.mark.slow),    # (8x8: the blocks and MobileNet in make test)
    (4, 4, "icarus", 1), (4, 8, "ghdl", 1)])
def test_depthwise_net_matches_reference(simulate_case, rows, cols, simulator, batch):
    model = depthwise_model()
    torch.manual_seed(22)
    case = make_case(model, AcceleratorConfig(rows=rows, cols=cols), torch.randn(2 * batch, *INPUT_SHAPE), batch)
    assert len(taps_ops(case.program)) == 2
    check_taps_report(case, simulate_case(case, simulator, seed=rows * cols))


@pytest.mark.parametrize("simulator", ["verilator", "icarus"])
def test_depthwise_on_the_planar_input_matches_reference(simulate_case, simulator):
    torch.manual_seed(24)
    case = make_case(input_depthwise_model(), AcceleratorConfig(rows=4, cols=4), torch.randn(4, 12, 6, 9), 2)
    assert case.program.input.planar and len(taps_ops(case.program)) == 1
    check_taps_report(case, simulate_case(case, simulator, seed=5))


def check_taps_report(case, report):
    """The depthwise ops' phases count their compute steps as array steps (pushes alone
    do not use the array), and take their steps plus at most the op overhead."""
    from hdl.design_report import op_cycle_bounds
    for result in report.results:
        for op, (cycles, _) in zip(case.program.ops, result["phases"]):
            low, high = op_cycle_bounds(op, case.program)
            assert low <= cycles <= high, (op.name, op.steps, cycles)
    for index, op in enumerate(case.program.ops):
        if getattr(op, "tap_tiles", 0):
            assert all(r["phases"][index][1] == op.compute_steps for r in report.results), op.name
