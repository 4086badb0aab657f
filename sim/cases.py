"""Test cases: a quantized model, inputs and their reference outputs."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hdl.config import AcceleratorConfig
from hdl.compiler.program import Program, lower
from pytorch_ref.ir import integer_semantics as sem
from pytorch_ref.zoo import models
from pytorch_ref.frontends.float_model import quantize_model
from pytorch_ref.ir.quantized_model import QuantizedModel
from pytorch_ref.reference import run_integer_reference


@dataclass
class Case:
    name: str
    model: QuantizedModel
    program: Program
    inputs: list[np.ndarray]        # int8 codes, model.input_shape each
    expected: list[np.ndarray]      # int8 codes, model.output_shape each


def quantized_random_model(name: str, seed: int = 0, calibration: int = 256) -> tuple[QuantizedModel, torch.Tensor]:
    """A model of the zoo with seeded random weights, calibrated on seeded normal data."""
    model = models.build(name, seed=seed)
    generator = torch.Generator().manual_seed(seed + 1)
    data = torch.randn((calibration,) + models.INPUT_SHAPES[name], generator=generator)
    return quantize_model(model, data, name=name), data


def batched(values: np.ndarray, batch: int) -> list[np.ndarray]:
    """Split ``[count, ...]`` into inferences: single samples, or ``[batch, ...]`` groups."""
    if len(values) % batch:
        raise ValueError(f"the number of inputs ({len(values)}) must be a multiple of the batch ({batch})")
    if batch == 1:
        return list(values)
    return [values[i:i + batch] for i in range(0, len(values), batch)]


def make_case(model: QuantizedModel, config: AcceleratorConfig, inputs: torch.Tensor, batch: int = 1) -> Case:
    """Lower ``model`` and compute reference outputs of the float ``inputs``."""
    codes = sem.quantize_activation(inputs, model.input_quant.scale, model.input_quant.zero_point)
    expected = run_integer_reference(model, codes).numpy()
    return Case(model.name, model, lower(model, config, batch), batched(codes.numpy(), batch),
                batched(expected, batch))


def random_case(name: str, config: AcceleratorConfig, count: int, seed: int = 0, batch: int = 1) -> Case:
    """``count`` inferences (of ``batch`` inputs each) of a seeded random model of the zoo."""
    model, data = quantized_random_model(name, seed)
    generator = torch.Generator().manual_seed(seed + 2)
    inputs = torch.randn((count * batch,) + models.INPUT_SHAPES[name], generator=generator)
    return make_case(model, config, inputs, batch)


@dataclass
class TrainedCase(Case):
    labels: list[int] | None         # held-out labels of the simulated inputs (classifiers)
    accuracy: dict                   # float / int8 figures on the whole held-out split


def trained_case(name: str, config: AcceleratorConfig, count: int, log=print, batch: int = 1,
                 weight_bits=None) -> TrainedCase:
    """A shipped model, trained (or loaded from the cache), quantized with weights of
    ``weight_bits`` (see :mod:`pytorch_ref.frontends.precision`), with its first
    ``count`` held-out inputs (``count // batch`` inferences)."""
    from pytorch_ref.zoo.train import accuracy_report, quantize_trained
    compiled = quantize_trained(name, log=log, weight_bits=weight_bits)
    codes = compiled.x_codes[:count]
    if len(codes) < count:
        raise ValueError(f"{name} has only {len(compiled.x_codes)} held-out inputs, not {count}")
    expected = run_integer_reference(compiled.quantized, codes).numpy()
    labels = None if compiled.y_test is None else [int(y) for y in compiled.y_test[:count]]
    return TrainedCase(name, compiled.quantized, lower(compiled.quantized, config, batch),
                       batched(codes.numpy(), batch), batched(expected, batch), labels,
                       accuracy_report(name, compiled))
