"""Bounded proof of the top level's stream handshakes (see :mod:`sim.formal`)."""
import numpy as np

from hdl.compiler.program import lower
from hdl.config import AcceleratorConfig
from sim.formal import prove
from tests.test_lowering import dense_model


def _program():
    """A dense layer on a 2x2 array with a 16-bit bus: one inference in about 48 cycles, so
    the bound of 104 covers two back to back (the cover is reached in step 103)."""
    model = dense_model(np.array([[3, -5], [7, 1]]), [10, -20], input_zero_point=4)
    return lower(model, AcceleratorConfig(rows=2, cols=2, accumulator_depth=2, input_bus_bits=16,
                                          accumulator_bits=17))


def test_handshakes_hold_for_every_trace(tmp_path):
    outcome = prove(_program(), tmp_path, depth=104)
    assert outcome["proved"], outcome["log"][-3000:]
    assert outcome["covered"], "the bound must cover two whole inferences: " + outcome["log"][-3000:]


def test_a_false_property_is_reported(tmp_path):
    # (The first output is taken in step 51: the false assertion fails there.)
    outcome = prove(_program(), tmp_path, depth=53, broken=True)
    assert outcome["proved"] is False
    assert "Assert failed" in outcome["log"] and "covered" not in outcome
