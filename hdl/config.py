"""The accelerator's configuration: one validated, frozen object that derives the rest."""
from __future__ import annotations

import math
from dataclasses import dataclass

#: Width of the top level's ``input_data`` port (the original sketch's entity).
INPUT_BUS_BITS = 1024
#: Width of the top level's ``output_data`` port: one-hot of the predicted class.
OUTPUT_CLASSES = 10
#: Where the requantizer's products may be computed (see :class:`AcceleratorConfig`).
REQUANTIZER_MULTIPLIERS = ("dsp", "logic")


def _check_positive_int(name: str, value, maximum: int | None = None):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be a positive integer, not {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, not {value!r}")


@dataclass(frozen=True)
class AcceleratorConfig:
    """Array shape, number formats and buffer sizes of one accelerator.

    Parameters
    ----------
    rows, cols:
        Shape of the systolic array. Rows take the reduction dimension (input
        channels x kernel taps), columns the output channels.
    data_bits:
        Width of activations and weights (signed). Only 8 is supported.
    accumulator_bits:
        Width of the accumulators. Lowering proves, layer by layer, that no int8 input
        can overflow it (:func:`pytorch_ref.ir.integer_semantics.accumulator_range`).
    accumulator_depth:
        Output pixels one pass over the reduction dimension can hold (the depth of the
        accumulator memory). Larger means fewer weight reloads on convolutions.
    input_bus_bits:
        Width of ``input_data``; the sketch fixes it at 1024.
    requantizer_multipliers:
        Where the requantizer's ``cols`` products (accumulator x 31-bit multiplier) are
        computed: ``"dsp"`` (the default: one 18x18 DSP multiplier a column for the largest
        partial product, adder trees for the rest) or ``"logic"`` (adder trees only: no DSP
        block beyond one a PE, at about 2,500 LUT4 a column).
    runtime_weights:
        ``False`` (the default): weights, biases and requantization parameters are ROM
        contents. ``True``: they and the ops' input zero points are writable through the
        weight port, so that a model with the same layer shapes runs on the same hardware
        (:mod:`hdl.compiler.weight_image`).
    """
    rows: int = 8
    cols: int = 8
    data_bits: int = 8
    accumulator_bits: int = 32
    accumulator_depth: int = 256
    input_bus_bits: int = INPUT_BUS_BITS
    requantizer_multipliers: str = "dsp"
    runtime_weights: bool = False

    def __post_init__(self):
        _check_positive_int("array rows", self.rows, maximum=64)
        _check_positive_int("array cols", self.cols, maximum=64)
        _check_positive_int("data bits", self.data_bits)
        if self.data_bits != 8:
            raise ValueError(f"data bits must be 8, not {self.data_bits!r}")
        _check_positive_int("accumulator bits", self.accumulator_bits, maximum=48)
        if self.accumulator_bits < 2 * self.data_bits + 1:
            raise ValueError(f"accumulator bits must be at least {2 * self.data_bits + 1}, "
                             f"not {self.accumulator_bits!r}")
        _check_positive_int("accumulator depth", self.accumulator_depth, maximum=65536)
        _check_positive_int("input bus bits", self.input_bus_bits)
        if self.input_bus_bits % self.data_bits:
            raise ValueError(f"input bus bits must be a multiple of {self.data_bits}, "
                             f"not {self.input_bus_bits!r}")
        if self.requantizer_multipliers not in REQUANTIZER_MULTIPLIERS:
            raise ValueError(f"requantizer multipliers must be one of {', '.join(map(repr, REQUANTIZER_MULTIPLIERS))}, "
                             f"not {self.requantizer_multipliers!r}")
        if not isinstance(self.runtime_weights, bool):
            raise TypeError(f"runtime weights must be True or False, not {self.runtime_weights!r}")
        if self.bank_width > self.input_values_per_beat:
            raise ValueError(f"the activation word (lcm of rows and cols = {self.bank_width} values) must fit "
                             f"one input beat ({self.input_values_per_beat} values of {self.data_bits} bits); "
                             f"pick rows and cols with a smaller lcm, or a wider input bus")

    # Derived sizes -------------------------------------------------------------------------
    @property
    def pes(self) -> int:
        return self.rows * self.cols

    @property
    def product_bits(self) -> int:
        return 2 * self.data_bits

    @property
    def bank_width(self) -> int:
        """Values per activation-memory word: ``lcm(rows, cols)``, so that a column of
        ``rows`` inputs and a row of ``cols`` outputs each sit inside one word."""
        return math.lcm(self.rows, self.cols)

    @property
    def input_values_per_beat(self) -> int:
        return self.input_bus_bits // self.data_bits
