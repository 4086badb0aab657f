"""Lowering a QuantizedModel to a Program: the accumulator proof and the schedule's numbers."""
import numpy as np
import pytest

from hdl.compiler.program import GemmOp, PoolOp, lower
from hdl.config import AcceleratorConfig
from pytorch_ref.ir import integer_semantics as sem
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
    program = lower(model, AcceleratorConfig(rows=4, cols=4))
    gemm, pooling = program.ops
    assert isinstance(gemm, GemmOp) and isinstance(pooling, PoolOp)
    assert (gemm.channel_tiles, gemm.n_tiles, gemm.kernel, gemm.padding) == (1, 2, (3, 3), (1, 1))
    assert gemm.k_tiles == 9 and gemm.steps == 2 * 9 * 64
    assert gemm.macs == 64 * 6 * 27 and gemm.input_zero_point == 3
    assert (pooling.dest.height, pooling.dest.width, pooling.steps) == (4, 4, 16 * 2 * 4)     # 2 words a pixel (6 channels, 4 lanes a word), 2x2 taps
    assert program.weight_tiles.shape == (2 * 9, 4, 4)
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
