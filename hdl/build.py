"""A model and a configuration to the accelerator's top-level component."""
from hdl.compiler.program import lower
from hdl.config import AcceleratorConfig
from hdl.gateware.top import NeuralNetworkAccelerator


def build_top(model, config: AcceleratorConfig) -> NeuralNetworkAccelerator:
    """Lower ``model`` (a :class:`QuantizedModel`) for ``config`` and build its top level."""
    return NeuralNetworkAccelerator(lower(model, config))
