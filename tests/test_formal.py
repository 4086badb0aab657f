"""Bounded proof of the top level's stream handshakes (see :mod:`sim.formal`)."""
import numpy as np
import pytest

from hdl.compiler.program import lower
from hdl.config import AcceleratorConfig
from sim.formal import HandshakeHarness, prove
from tests.test_lowering import dense_model


def _program():
    """A dense layer on a 2x2 array with a 16-bit bus: one inference in about 52 cycles.
    Its first inference ends in step 52 of the cover, its second in step 105."""
    model = dense_model(np.array([[3, -5], [7, 1]]), [10, -20], input_zero_point=4)
    return lower(model, AcceleratorConfig(rows=2, cols=2, accumulator_depth=2, input_bus_bits=16,
                                          accumulator_bits=17))


def test_handshakes_hold_for_every_trace_of_an_inference(tmp_path):
    """Every trace up to the end of one whole inference (22 s; the bound of two below takes
    two minutes, and belongs to make test-all)."""
    outcome = prove(_program(), tmp_path, depth=53, inferences=1)
    assert outcome["proved"], outcome["log"][-3000:]
    assert outcome["covered"], "the bound must cover a whole inference: " + outcome["log"][-3000:]


@pytest.mark.slow
def test_handshakes_hold_for_every_trace_of_two_inferences(tmp_path):
    outcome = prove(_program(), tmp_path, depth=106)
    assert outcome["proved"], outcome["log"][-3000:]
    assert outcome["covered"], "the bound must cover two whole inferences: " + outcome["log"][-3000:]


def test_a_false_property_is_reported(tmp_path):
    # (The first output is taken in step 52: the false assertion fails there.)
    outcome = prove(_program(), tmp_path, depth=54, broken=True)
    assert outcome["proved"] is False
    assert "Assert failed" in outcome["log"] and "covered" not in outcome


def test_a_bound_too_short_for_an_inference_is_reported(tmp_path):
    outcome = prove(_program(), tmp_path, depth=30, inferences=1)
    assert outcome["proved"] and outcome["covered"] is False


def test_the_cover_takes_one_or_two_inferences():
    with pytest.raises(ValueError, match="the cover takes 1 or 2 inferences, not 3"):
        HandshakeHarness(_program(), inferences=3)
