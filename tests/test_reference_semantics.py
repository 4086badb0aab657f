"""Hand-checked vectors for pytorch_ref.ir.integer_semantics (rounding, saturation, multipliers)."""
import itertools

import numpy as np
import pytest
import torch

from pytorch_ref.ir import integer_semantics as sem

@pytest.mark.parametrize("value, shift, expected", [
    (5, 1, 3),          # 2.5 -> 3
    (-5, 1, -2),        # -2.5 -> -2 (ties towards +inf, not away from zero)
    (-7, 1, -3),        # -3.5 -> -3
    (7, 1, 4),          # 3.5 -> 4
    (3, 1, 2),          # 1.5 -> 2
    (-3, 1, -1),        # -1.5 -> -1
    (6, 2, 2),          # 1.5 -> 2
    (-6, 2, -1),        # -1.5 -> -1
    (5, 2, 1),          # 1.25 -> 1
    (-5, 2, -1),        # -1.25 -> -1
    (7, 2, 2),          # 1.75 -> 2
    (-7, 2, -2),        # -1.75 -> -2
    (4, 1, 2),
    (-4, 1, -2),
    (0, 5, 0),
    (2 ** 61 + 2 ** 60, 62, 1),     # 0.75 -> 1 at the widest shift
])
def test_rounding_shift_right_half_up(value, shift, expected):
    result = sem.rounding_shift_right_half_up(torch.tensor([value]), shift)
    assert result.dtype == torch.int64
    assert result.item() == expected


@pytest.mark.parametrize("shift", [0, 63])
def test_rounding_shift_range(shift):
    with pytest.raises(ValueError, match=r"^shift must be in \[1, 62\]$"):
        sem.rounding_shift_right_half_up(torch.tensor([1]), shift)


def test_requantize_saturates_and_clamps():
    # multiplier 2**30, shift 31: a rescale of exactly 0.5.
    multiplier, shift = torch.tensor([2 ** 30]), torch.tensor([31])
    acc = torch.tensor([[0, 5, -5, -7, 1000, -1000, 254, 255, -257]])
    out = sem.requantize_half_up(acc, multiplier, shift, zero_point=0, clamp_min=-128, clamp_max=127)
    assert out.dtype == torch.int8
    assert out.tolist() == [[0, 3, -2, -3, 127, -128, 127, 127, -128]]
    # The zero point is added after rounding, before clamping.
    out = sem.requantize_half_up(acc, multiplier, shift, zero_point=-10, clamp_min=-128, clamp_max=127)
    assert out.tolist() == [[-10, -7, -12, -13, 127, -128, 117, 118, -128]]
    # Fused ReLU clamps at the zero point.
    clamp_min = sem.relu_clamp_min(-10, relu=True)
    assert clamp_min == -10
    out = sem.requantize_half_up(acc, multiplier, shift, zero_point=-10, clamp_min=clamp_min, clamp_max=127)
    assert out.tolist() == [[-10, -7, -10, -10, 127, -10, 117, 118, -10]]


def test_requantize_rejects_accumulator_overflow():
    with pytest.raises(OverflowError, match=r"^accumulator exceeds 32 bits$"):
        sem.requantize_half_up(torch.tensor([[2 ** 31]]), torch.tensor([2 ** 30]), torch.tensor([31]), 0, -128, 127)


@pytest.mark.parametrize("real, expected", [
    (0.5, (2 ** 30, 31)),
    (1.0, (2 ** 30, 30)),
    (0.75, (3 * 2 ** 29, 31)),
    (0.1, (1717986918, 34)),             # round(0.8 * 2**31) = round(1717986918.4)
    (1 - 2 ** -40, (2 ** 30, 30)),       # the mantissa rounds up into the next power of two
    (2 ** -40, (2 ** 22, 62)),           # beyond 62 bits of shift the multiplier loses bits
    (2 ** 29, (2 ** 30, 1)),
])
def test_quantize_multiplier(real, expected):
    multiplier, shift = sem.quantize_multiplier(real)
    assert (multiplier, shift) == expected
    assert multiplier * 2.0 ** -shift == pytest.approx(real, rel=2 ** -30)


@pytest.mark.parametrize("real, message", [
    (0.0, r"^rescale factor must be a positive finite number, not 0\.0$"),
    (-0.5, r"^rescale factor must be a positive finite number, not -0\.5$"),
    (float("inf"), r"^rescale factor must be a positive finite number, not inf$"),
    (2.0 ** 30, r"^rescale factor must be below 2\*\*30, not 1073741824\.0$"),
])
def test_quantize_multiplier_rejects(real, message):
    with pytest.raises(ValueError, match=message):
        sem.quantize_multiplier(real)


def test_quantize_activation_rounds_half_to_even_and_saturates():
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 1000.0, -1000.0])
    assert sem.quantize_activation(x, 1.0, 0).tolist() == [0, 2, 2, 0, -2, 127, -128]
    assert sem.quantize_activation(x, 1.0, -3).tolist() == [-3, -1, -1, -3, -5, 127, -128]


def test_signed_bits():
    assert [sem.signed_bits(lo, hi) for lo, hi in [(0, 0), (-1, 0), (-128, 127), (-129, 0), (0, 128),
                                                   (-2 ** 31, 2 ** 31 - 1), (0, 2 ** 31)]] == [1, 1, 8, 9, 9, 32, 33]


def test_accumulator_range_is_tight_and_covers_partial_sums():
    weight = np.array([[127, -127, 3], [0, 0, 0]])
    bias = np.array([-1000, 50])
    # Channel 0 reaches 127*127 + 127*128 + 3*127 - 1000 with x = (127, -128, 127); partial
    # sums without the bias reach 127*127 + 127*128 + 3*127; the least is -(128*127 + 127*127 + 3*128) - 1000.
    assert sem.accumulator_range(weight, bias, -128, 127) == (-(128 * 127 + 127 * 127 + 3 * 128) - 1000,
                                                              127 * 127 + 127 * 128 + 3 * 127)
    # Exhaustive check on a small layer: every input's sum and partial sums lie inside.
    rng = np.random.default_rng(0)
    w, b = rng.integers(-127, 128, (2, 3)), rng.integers(-5000, 5000, 2)
    lo, hi = sem.accumulator_range(w, b, -2, 3)
    values = [v for x in itertools.product(range(-2, 4), repeat=3) for n in range(2)
              for v in (b[n] + np.cumsum(w[n] * x), np.cumsum(w[n] * x))]
    assert lo == min(v.min() for v in values) and hi == max(v.max() for v in values)
    with pytest.raises(ValueError, match=r"must contain 0"):
        sem.accumulator_range(w, b, 1, 3)


def test_numpy_and_torch_agree():
    """One formula, two array libraries: NumPy in, NumPy out; torch in, torch out; same bits."""
    rng = np.random.default_rng(0)
    acc = rng.integers(sem.ACCUMULATOR_MIN, sem.ACCUMULATOR_MAX, (16, 6), endpoint=True)
    multiplier = rng.integers(sem.MULTIPLIER_MIN, sem.MULTIPLIER_MAX, 6, endpoint=True)
    shift = rng.integers(sem.SHIFT_MIN, sem.SHIFT_MAX, 6, endpoint=True)
    x = (rng.standard_normal(64) * 50).astype(np.float32)
    x[:4] = [0.5, 1.5, -2.5, 2.5]
    cases = [
        (sem.rounding_shift_right_half_up, (acc, shift), np.int64, torch.int64),
        (sem.requantize_half_up, (acc, multiplier, shift, -7, -7, 127), np.int8, torch.int8),
        (sem.quantize_activation, (x, 0.3, 5), np.int8, torch.int8),
        (sem.dequantize_activation, (x.astype(np.int8), 0.3, 5), np.float32, torch.float32),
    ]
    for function, args, np_dtype, torch_dtype in cases:
        expected = function(*args)
        got = function(*(torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args))
        assert isinstance(expected, np.ndarray) and expected.dtype == np_dtype
        assert isinstance(got, torch.Tensor) and got.dtype == torch_dtype
        assert np.array_equal(got.numpy(), expected), function.__name__
    with pytest.raises(OverflowError):
        sem.requantize_half_up(np.array([2 ** 31]), np.array([2 ** 30]), np.array([31]), 0, -128, 127)


@pytest.mark.parametrize("scale, zero_point, low, high, expected", [
    (0.05, 0, 0.0, 6.0, (0, 120)),              # ReLU6: 6 / 0.05 = 120
    (0.1, 3, -0.5, 0.4, (-2, 7)),               # Hardtanh(-0.5, 0.4): -5 + 3, 4 + 3
    (0.05, -128, 0.0, None, (-128, 127)),       # ReLU with the zero point at the bottom
    (0.25, 0, 0.125, 0.375, (0, 2)),            # 0.5 and 1.5: ties to even
    (0.01, 0, -5.0, 5.0, (-128, 127)),          # bounds past the codes saturate
    (0.05, 0, None, None, (-128, 127)),
])
def test_activation_clamp(scale, zero_point, low, high, expected):
    assert sem.activation_clamp(scale, zero_point, low, high) == expected


def test_activation_clamp_rejects_an_empty_range():
    with pytest.raises(ValueError, match=r"^clamp \[2.0, 1.0\] is empty at scale 0.05 and zero point 0$"):
        sem.activation_clamp(0.05, 0, 2.0, 1.0)
