"""Lowering a QuantizedModel to a Program: the accumulator proof and the schedule's numbers."""
import numpy as np
import pytest

from hdl.compiler.program import GemmOp, PoolOp, RowStacking, lower
from hdl.config import AcceleratorConfig
from pytorch_ref.ir import integer_semantics as sem
from sim.cases import random_case
from pytorch_ref.ir.quantized_model import (Conv2dLayer, DenseLayer, MaxPool2dLayer, QuantizedModel, QuantParams,
                                            Requantization)


def _requant(n: int) -> Requantization:
    return Requantization(np.full(n, 2 ** 30, dtype=np.int64), np.full(n, 40, dtype=np.int64), 0, -128)


def dense_model(weight, bias, input_zero_point: int = 0) -> QuantizedModel:
    weight = np.asarray(weight, dtype=np.int8)
    n, k = weight.shape
    layer = DenseLayer("fc", weight, np.asarray(bias, dtype=np.int32), QuantParams(1.0, input_zero_point),
                       QuantParams(1.0, 0), _requant(n))
    return QuantizedModel("m", (k,), QuantParams(1.0, input_zero_point), (layer,))


def test_accumulator_overflow_with_the_bias_is_rejected():
    """The probe of issue 13: K=8, weights 127, bias 2**23 - 1000 on a 24-bit accumulator
    used to be accepted, and the hardware gave -63 where the reference gave 65."""
    model = dense_model(np.full((1, 8), 127), [2 ** 23 - 1000])
    with pytest.raises(ValueError, match=r"^fc: its sums reach \[-130048, 8516640\] for some int8 input .* "
                                         r"needs 25 accumulator bits; the configuration has 24$"):
        lower(model, AcceleratorConfig(accumulator_bits=24))
    lower(model, AcceleratorConfig(accumulator_bits=25))


def test_the_proof_is_tight_at_the_boundary():
    products = 8 * 127 * 127                          # x = 127 on every input
    fits = dense_model(np.full((1, 8), 127), [2 ** 23 - 1 - products])
    lower(fits, AcceleratorConfig(accumulator_bits=24))
    over = dense_model(np.full((1, 8), 127), [2 ** 23 - products])
    with pytest.raises(ValueError, match=r"needs 25 accumulator bits"):
        lower(over, AcceleratorConfig(accumulator_bits=24))


def test_the_proof_uses_the_folded_zero_point():
    """The hardware adds raw codes times weights to ``bias - zp * sum(w)``: a zero point
    moves the bias the hardware holds, so it moves the bound."""
    weight = np.full((1, 8), 127)
    assert lower(dense_model(weight, [0], input_zero_point=0), AcceleratorConfig(accumulator_bits=18)).ops
    with pytest.raises(ValueError, match=r"needs 19 accumulator bits"):
        lower(dense_model(weight, [0], input_zero_point=-128), AcceleratorConfig(accumulator_bits=18))


def test_program_numbers_of_a_small_cnn():
    rng = np.random.default_rng(1)
    conv = Conv2dLayer("conv", rng.integers(-127, 128, (6, 3, 3, 3)).astype(np.int8), np.zeros(6, np.int32),
                       QuantParams(0.1, 3), QuantParams(0.1, 0), _requant(6), stride=(1, 1), padding=(1, 1))
    pool = MaxPool2dLayer("pool", (2, 2), (2, 2))
    model = QuantizedModel("cnn", (3, 8, 8), QuantParams(0.1, 3), (conv, pool))
    program = lower(model, AcceleratorConfig(rows=4, cols=4), stack_input_rows=False)
    gemm, pooling = program.ops
    assert isinstance(gemm, GemmOp) and isinstance(pooling, PoolOp)
    assert (gemm.channel_tiles, gemm.n_tiles, gemm.kernel, gemm.padding) == (1, 2, (3, 3), (1, 1))
    assert gemm.k_tiles == 9 and gemm.steps == 2 * 9 * 64
    assert gemm.macs == 64 * 6 * 27 and gemm.input_zero_point == 3
    # 2 words a pixel (6 channels, 4 lanes a word), read at once; 2x2 taps.
    assert not gemm.folded and pooling.words_per_read == 2   # 3 kernel rows of 9 values would take 9 tiles too
    # A read takes a kernel row: 2 taps of 2 words; the 2 words of a result are written
    # while the next pixel's 2 reads run.
    assert pooling.taps_per_read == 2 and pooling.read_words == 4
    assert (pooling.dest.height, pooling.dest.width, pooling.steps) == (4, 4, 16 * 1 * 2)
    assert program.weight_words.shape == (2 * 9, 4, 4)
    # Ping-pong: the pooling op reads where the convolution wrote.
    assert pooling.source == gemm.dest and gemm.source == program.input and program.output == pooling.dest
    assert sem.ACTIVATION_MIN <= program.clamp_min.min()


def test_model_without_weighted_layers_is_rejected():
    model = QuantizedModel("pool-only", (2, 4, 4), QuantParams(1.0, 0), (MaxPool2dLayer("pool", (2, 2), (2, 2)),))
    with pytest.raises(ValueError, match=r"^model 'pool-only' has no Conv2d or Linear layer"):
        lower(model, AcceleratorConfig())


def test_bias_beyond_the_ir_accumulator_names_the_layer():
    """quantize_model could give Linear(8, 1) a bias of 2,147,478,618, which the reference
    then overflowed on inputs inside the calibration range."""
    with pytest.raises(ValueError, match=r"^fc: bias \+ sum of \(x - zero point\) \* weight reaches "
                                         r"\[.*\] for some int8 input, beyond the 32-bit accumulator"):
        dense_model(np.full((1, 8), 127), [2_147_478_618])


def _lenet_like(rng):
    def conv(name, c_in, c_out):
        return Conv2dLayer(name, rng.integers(-127, 128, (c_out, c_in, 5, 5)).astype(np.int8), np.zeros(c_out, np.int32),
                           QuantParams(0.1, 3), QuantParams(0.1, 0), _requant(c_out))
    layers = (conv("c1", 1, 10), MaxPool2dLayer("p1", (2, 2), (2, 2)), conv("c2", 10, 20),
              MaxPool2dLayer("p2", (2, 2), (2, 2)), conv("c3", 20, 50))
    return QuantizedModel("lenet_like", (1, 44, 44), QuantParams(0.1, 3), layers)


def test_folding_where_it_saves_tiles():
    """LeNet's convolutions fold on 8 rows: the input and both pools' outputs are packed
    (each conv reads kernel rows of kw * C consecutive values), the k tiles drop from
    25, 50, 75 to 5, 35, 65, and the packed tensors keep guard words around them."""
    program = lower(_lenet_like(np.random.default_rng(2)), AcceleratorConfig(rows=8, cols=8), stack_input_rows=False)
    c1, p1, c2, p2, c3 = program.ops
    assert [op.folded for op in (c1, c2, c3)] == [True, True, True]
    assert [(op.row_tiles, op.k_tiles) for op in (c1, c2, c3)] == [(1, 5), (7, 35), (13, 65)]
    assert [op.source.packed_lanes for op in (c1, c2, c3)] == [8, 8, 8]
    assert not any(op.dest.packed_lanes for op in (c1, c2, c3)) and p1.dest.packed_lanes and p2.dest.packed_lanes
    assert program.input.base >= 1 and program.input.words == -(-44 * 44 // 8)
    # 10 and 20 channels: 2 and 3 words a pixel, each pixel's read at once (4 taps leave
    # time to write the 3 or 4 words the packed lanes touch).
    assert (p1.words_per_read, p2.words_per_read) == (2, 3) and p1.steps == 400 * 4 and p2.steps == 64 * 4
    # An op's source and destination do not overlap, and the packed tensors' guard words
    # stay inside the memory.
    for op in program.ops:
        low, high = sorted((op.source, op.dest), key=lambda t: t.base)
        assert low.base + low.words <= high.base
        if op.dest.packed_lanes:
            assert op.dest.base >= 1 and op.dest.base + op.dest.words + 2 <= program.activation_words


def test_pools_read_kernel_rows_where_their_writes_keep_up():
    """On 16 lanes LeNet's first pool reads both taps of a kernel row at once (10
    channels: one word a pixel), halving its reads. Its second pool's 20 channels take two
    words a pixel, and its packed output three words, more than two reads leave time to
    write: it reads a tap at a time, as both do on 8 lanes."""
    model = _lenet_like(np.random.default_rng(2))
    _, p1, _, p2, _ = lower(model, AcceleratorConfig(rows=16, cols=16)).ops
    assert [(p.taps_per_read, p.words_per_read, p.read_words) for p in (p1, p2)] == [(2, 1, 2), (1, 2, 2)]
    assert (p1.steps, p2.steps) == (400 * 2, 64 * 4)
    _, p1, _, p2, _ = lower(model, AcceleratorConfig(rows=8, cols=8)).ops
    assert [(p.taps_per_read, p.words_per_read) for p in (p1, p2)] == [(1, 2), (1, 3)]


def test_folding_only_where_it_saves_tiles():
    """On 12 rows, 10 channels take 5 tiles a kernel row either way: that layer keeps the
    tap-by-tap order (its input is not packed), the others fold (12-lane words too); so on
    4 rows does the third layer, and a pool of one tap cannot write packed."""
    model = _lenet_like(np.random.default_rng(3))
    c1, _, c2, p2, c3 = lower(model, AcceleratorConfig(rows=12, cols=12)).ops
    assert (c1.folded, c2.folded, c3.folded) == (True, False, True)
    assert not c2.source.packed_lanes and p2.dest.packed_lanes == 12
    program = lower(model, AcceleratorConfig(rows=4, cols=8))
    c1, _, c2, _, c3 = program.ops
    assert (c1.folded, c2.folded, c3.folded) == (True, True, False)    # 20 channels = 5 tiles of 4 either way
    rng = np.random.default_rng(4)
    layers = (Conv2dLayer("c1", rng.integers(-5, 6, (3, 2, 1, 1)).astype(np.int8), np.zeros(3, np.int32),
                          QuantParams(0.1, 0), QuantParams(0.1, 0), _requant(3)),
              MaxPool2dLayer("p", (1, 1), (1, 1)),
              Conv2dLayer("c2", rng.integers(-5, 6, (2, 3, 3, 3)).astype(np.int8), np.zeros(2, np.int32),
                          QuantParams(0.1, 0), QuantParams(0.1, 0), _requant(2)))
    program = lower(QuantizedModel("one_tap", (2, 6, 6), QuantParams(0.1, 0), layers), AcceleratorConfig(rows=8, cols=8))
    assert not program.ops[1].dest.packed_lanes and not program.ops[2].folded


def test_row_stacking_where_it_saves_cycles():
    """LeNet's first convolution (1 channel, 5x5) runs on its input with the 5 rows of each
    window stacked as channels: a 1x5 kernel on 5 channels, 25 values in 4 tiles of 8
    rows (5 folded) and 2 of 16 (5); the stacked input is packed, 40 rows of 44."""
    model = _lenet_like(np.random.default_rng(2))
    for rows, k_tiles in ((8, 4), (16, 2)):
        program = lower(model, AcceleratorConfig(rows=rows, cols=rows))
        c1 = program.ops[0]
        assert program.input_stacking == RowStacking(kernel_rows=5, stride=1, padding=0, fill=3)
        assert (c1.kernel, c1.k_tiles, c1.folded) == ((1, 5), k_tiles, True)
        assert program.input == c1.source and program.input_shape == (1, 44, 44)
        assert (c1.source.channels, c1.source.height, c1.source.width, c1.source.packed_lanes) == (5, 40, 44, rows)
        assert [op.k_tiles for op in program.gemm_ops[1:]] == [
            op.k_tiles for op in lower(model, AcceleratorConfig(rows=rows, cols=rows), stack_input_rows=False).gemm_ops[1:]]


def test_row_stacking_only_where_it_saves_cycles():
    """No stacking for a 1-row kernel, for a first layer that is not a convolution, nor
    where the stacked kernel row takes as many tiles (8 channels on 8 rows: 9 either way)."""
    rng = np.random.default_rng(5)

    def first_conv(c_in, kernel):
        conv = Conv2dLayer("c", rng.integers(-127, 128, (4, c_in) + kernel).astype(np.int8), np.zeros(4, np.int32),
                           QuantParams(0.1, 3), QuantParams(0.1, 0), _requant(4), padding=(1, 1))
        return QuantizedModel("m", (c_in, 6, 6), QuantParams(0.1, 3), (conv,))

    assert lower(first_conv(8, (3, 3)), AcceleratorConfig(rows=8, cols=8)).input_stacking is None
    assert lower(first_conv(1, (1, 3)), AcceleratorConfig(rows=8, cols=8)).input_stacking is None
    assert lower(first_conv(1, (3, 3)), AcceleratorConfig(rows=8, cols=8)).input_stacking is not None
    dense = QuantizedModel("d", (6,), QuantParams(0.1, 0), (
        DenseLayer("fc", np.ones((2, 6), np.int8), np.zeros(2, np.int32), QuantParams(0.1, 0),
                   QuantParams(0.1, 0), _requant(2)),))
    assert lower(dense, AcceleratorConfig(rows=8, cols=8)).input_stacking is None


@pytest.mark.parametrize("stride, padding", [(1, 0), (2, 1), (3, 2)])
def test_row_stacking_layout_and_kernel(stride, padding):
    """Stacked channel ``i * C + c`` at ``(y, x)`` is channel ``c`` of input row
    ``y * stride - padding + i`` (the fill where that is padding), and the stacked kernel
    gives every output the same sum as the original convolution."""
    rng = np.random.default_rng(stride)
    stacking = RowStacking(kernel_rows=3, stride=stride, padding=padding, fill=-5)
    images = rng.integers(-128, 128, (2, 2, 7, 4)).astype(np.int8)
    stacked = stacking.stack(images)
    h_out = (7 + 2 * padding - 3) // stride + 1
    assert stacked.shape == (2, 6, h_out, 4) == (2,) + stacking.stacked_shape((2, 7, 4))
    for n, i, c, y, x in np.ndindex(2, 3, 2, h_out, 4):
        row = y * stride - padding + i
        assert stacked[n, i * 2 + c, y, x] == (images[n, c, row, x] if 0 <= row < 7 else -5)
    kernel = rng.integers(-128, 128, (3, 2, 3, 2))
    flat = stacking.stack_kernel(kernel)
    padded = np.pad(images.astype(np.int64), ((0, 0), (0, 0), (padding, padding), (0, 0)), constant_values=-5)
    for n, o, y, x in np.ndindex(2, 3, h_out, 3):
        want = (kernel[o] * padded[n, :, y * stride:y * stride + 3, x:x + 2]).sum()
        assert (flat[o, :, 0] * stacked[n, :, y, x:x + 2]).sum() == want


def _dense_chain(rng, sizes, input_zero_point=0) -> QuantizedModel:
    """Dense layers ``sizes[0] -> sizes[1] -> ...`` of random weights and biases."""
    layers = tuple(DenseLayer(f"fc{i}", rng.integers(-127, 128, (n, k)).astype(np.int8),
                              rng.integers(-1000, 1000, n).astype(np.int32),
                              QuantParams(0.1, input_zero_point if i == 0 else 0), QuantParams(0.1, 0), _requant(n))
                   for i, (k, n) in enumerate(zip(sizes, sizes[1:])))
    return QuantizedModel("chain", (sizes[0],), QuantParams(0.1, input_zero_point), layers)


def test_linear_1000_10_splits_its_reduction_over_four_columns():
    """Linear(1000, 10) on 8x8: 10 outputs take 2 tiles of 8 columns (10 busy of 16), 125
    steps each; split over 4 columns, 5 tiles of 2 outputs take 32 steps of 32 inputs (4
    words) each: 160 steps. Tile (nt, kt)'s PE (r, c) holds w[2 nt + c // 4, (8 kt + r) * 4 + c % 4];
    only a group's first column has the bias; the requantizer's column g serves output 2 nt + g."""
    rng = np.random.default_rng(11)
    model = _dense_chain(rng, (1000, 10), input_zero_point=-3)
    config = AcceleratorConfig(rows=8, cols=8)
    op, = lower(model, config).gemm_ops
    assert (op.split, op.n_tiles, op.k_tiles, op.steps, op.macs) == (4, 5, 32, 160, 10000)
    whole, = lower(model, config, split_reductions="never").gemm_ops
    assert (whole.split, whole.steps) == (1, 250)
    program = lower(model, config)
    layer = model.layers[0]
    weight = layer.weight.astype(np.int64)
    for nt in range(5):
        for kt in range(32):
            tile = program.weight_tile(op.weight_base + nt * 32 + kt, 8)
            for r in range(8):
                for c in range(8):
                    n, k = 2 * nt + c // 4, (8 * kt + r) * 4 + c % 4
                    assert tile[r, c] == (weight[n, k] if k < 1000 else 0), (nt, kt, r, c)
    bias = layer.bias - (-3) * weight.sum(axis=1)
    for nt in range(5):
        word = op.param_base + nt
        assert list(program.bias[word]) == [bias[2 * nt], 0, 0, 0, bias[2 * nt + 1], 0, 0, 0]
        assert list(program.multiplier[word]) == [2 ** 30] * 2 + [0] * 6
        assert list(program.shift[word]) == [40] * 2 + [1] * 6
    # The last read of the pixel (words 124 to 127 of the input's 125) stays inside the memory.
    assert program.activation_words >= op.source.base + 128


def test_split_factors_follow_the_array():
    """A split S divides cols, and a step's rows * S inputs are 1 to 4 whole words."""
    model = _dense_chain(np.random.default_rng(12), (1000, 10))
    for (rows, cols), split in {(8, 8): 4, (4, 4): 2, (4, 8): 4, (16, 16): 4, (2, 3): 3}.items():
        op, = lower(model, AcceleratorConfig(rows=rows, cols=cols)).gemm_ops
        assert op.split == split, (rows, cols)
        bank = AcceleratorConfig(rows=rows, cols=cols).bank_width
        assert rows * split % bank == 0 and rows * split <= 4 * bank
    # 12x12: 10 outputs fill one tile of 12 columns; no split has fewer steps than 84.
    op, = lower(model, AcceleratorConfig(rows=12, cols=12)).gemm_ops
    assert (op.split, op.steps) == (1, 84)


def test_splitting_only_where_it_pays():
    """LeNet's last layer (500 -> 10) would take 80 steps split instead of 126, but that is
    not 1% of the program's 55,000 steps once every GEMM op pays the adding stage's cycle:
    it stays whole; "always" splits it, "never" splits nothing, and other values are refused."""
    config = AcceleratorConfig(rows=8, cols=8)
    model = random_case("lenet", config, count=1).model
    assert all(op.split == 1 for op in lower(model, config).gemm_ops)
    assert [op.split for op in lower(model, config, split_reductions="always").gemm_ops] == [1, 1, 1, 1, 4]
    dense = _dense_chain(np.random.default_rng(13), (64, 32, 10))
    assert [op.split for op in lower(dense, config).gemm_ops] == [1, 4]      # 8 + 32 steps -> 5 + 32 + 2
    assert [op.split for op in lower(dense, config, split_reductions="never").gemm_ops] == [1, 1]
    # 64 -> 32 gains nothing from a split (32 steps at every S); "always" splits where it has fewer steps.
    assert [op.split for op in lower(dense, config, split_reductions="always").gemm_ops] == [1, 4]
    with pytest.raises(ValueError, match=r"^split_reductions must be 'auto', 'always' or 'never', not True$"):
        lower(dense, config, split_reductions=True)
