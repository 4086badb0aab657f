"""Every configuration error message, pinned."""
import pytest

from hdl.config import AcceleratorConfig


@pytest.mark.parametrize("kwargs, error, message", [
    ({"rows": 0}, ValueError, r"^array rows must be a positive integer, not 0$"),
    ({"rows": -3}, ValueError, r"^array rows must be a positive integer, not -3$"),
    ({"rows": 2.0}, TypeError, r"^array rows must be a positive integer, not 2\.0$"),
    ({"rows": True}, TypeError, r"^array rows must be a positive integer, not True$"),
    ({"rows": 65}, ValueError, r"^array rows must be at most 64, not 65$"),
    ({"cols": 0}, ValueError, r"^array cols must be a positive integer, not 0$"),
    ({"cols": "8"}, TypeError, r"^array cols must be a positive integer, not '8'$"),
    ({"data_bits": 4}, ValueError, r"^data bits must be 8, not 4$"),
    ({"accumulator_bits": 16}, ValueError, r"^accumulator bits must be at least 17, not 16$"),
    ({"accumulator_bits": 64}, ValueError, r"^accumulator bits must be at most 48, not 64$"),
    ({"accumulator_depth": 0}, ValueError, r"^accumulator depth must be a positive integer, not 0$"),
    ({"requantizer_multipliers": "luts"}, ValueError,
     r"^requantizer multipliers must be one of 'dsp', 'logic', not 'luts'$"),
    ({"input_bus_bits": 1020}, ValueError, r"^input bus bits must be a multiple of 8, not 1020$"),
    ({"rows": 63, "cols": 64}, ValueError, r"^the activation word \(lcm of rows and cols = 4032 values\) "
                                           r"must fit one input beat \(128 values of 8 bits\); pick rows and "
                                           r"cols with a smaller lcm, or a wider input bus$"),
    ({"rows": 3, "cols": 64}, ValueError, r"^the activation word \(lcm of rows and cols = 192 values\) must fit"),
    ({"rows": 8, "cols": 8, "input_bus_bits": 32}, ValueError,
     r"^the activation word \(lcm of rows and cols = 8 values\) must fit one input beat \(4 values of 8 bits\)"),
])
def test_bad_configuration_is_rejected(kwargs, error, message):
    with pytest.raises(error, match=message):
        AcceleratorConfig(**kwargs)


def test_derived_sizes():
    cfg = AcceleratorConfig(rows=4, cols=6)
    assert cfg.pes == 24
    assert cfg.bank_width == 12
    assert cfg.input_values_per_beat == 128


def test_wide_words_fit_a_wide_bus():
    assert AcceleratorConfig(rows=3, cols=64, input_bus_bits=2048).bank_width == 192
    assert AcceleratorConfig(rows=8, cols=8, input_bus_bits=64).input_values_per_beat == 8


def test_configuration_is_frozen():
    cfg = AcceleratorConfig()
    with pytest.raises(AttributeError):
        cfg.rows = 4
