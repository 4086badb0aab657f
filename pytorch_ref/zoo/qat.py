"""Quantization-aware fine-tuning at per-layer weight widths.

:func:`fine_tune` starts from the trained float model and trains it a few more epochs at
a small learning rate with every Conv2d/Linear weight passed through PyTorch's
``FakeQuantize``: per output channel, symmetric, over the ``b``-bit range of
:func:`~pytorch_ref.ir.integer_semantics.weight_range`, with the observer that
:func:`~pytorch_ref.frontends.quantize.quantize_weight` uses. The network thus learns
around the rounding of its own low-bit weights. The fake quantization is a
parametrization, removed at the end: the result is a plain float model, which
:func:`~pytorch_ref.zoo.train.compile_float` quantizes at the same widths (its codes are
the fake-quantized weights', ties apart).

Activations are not fake-quantized: they stay int8, calibrated after fine-tuning as for
any float model.
"""
from __future__ import annotations

import copy
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.ao.quantization import FakeQuantize
from torch.nn.utils import parametrize
from torch.utils.data import DataLoader, TensorDataset

from pytorch_ref.frontends.float_model import float_ops, weighted_layer_kinds
from pytorch_ref.frontends.precision import WeightBitsSpec, resolve_weight_bits
from pytorch_ref.frontends.quantize import weight_observer
from pytorch_ref.ir import integer_semantics as sem
from pytorch_ref.zoo import data
from pytorch_ref.zoo.train import HYPERPARAMETERS, Log, trained_model

__all__ = ["FINE_TUNING", "fine_tune"]

#: Fine-tuning settings: epochs and learning rate (a tenth of the training's peak).
FINE_TUNING = dict(epochs=4, lr=2e-4, seed=0)


class _FakeQuantizedWeight(nn.Module):
    """A parametrization: the weight as its ``bits``-bit per-channel fake quantization."""

    def __init__(self, bits: int):
        super().__init__()
        low, high = sem.weight_range(bits)
        self.fake_quantize = FakeQuantize(observer=type(weight_observer(bits)), quant_min=low, quant_max=high,
                                          dtype=torch.qint8, qscheme=torch.per_channel_symmetric, ch_axis=0)

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return self.fake_quantize(weight)


def _weighted_modules(model: nn.Module, weight_bits: WeightBitsSpec) -> list[tuple[nn.Module, int]]:
    """Each weighted module of ``model`` with its width. The names are the quantizer's
    (``<module path>.<type>``); a layer whose weights the front end changed (a BatchNorm
    folded into it) cannot be fine-tuned in place and is refused."""
    ops = {op.name: op for op in float_ops(model)}
    widths = resolve_weight_bits(weight_bits, weighted_layer_kinds(list(ops.values())))
    modules = dict(model.named_modules())
    found = []
    for name, bits in widths.items():
        module = modules.get(name.rsplit(".", 1)[0])
        if not isinstance(module, (nn.Conv2d, nn.Linear)) or not torch.equal(module.weight, ops[name].module.weight):
            raise ValueError(f"{name}: only Conv2d and Linear layers without a BatchNorm after them can be "
                             f"fine-tuned in place")
        found.append((module, bits))
    return found


def fine_tune(name: str, weight_bits: WeightBitsSpec, log: Log = print) -> nn.Module:
    """The trained classifier ``name`` fine-tuned with its weights fake-quantized at
    ``weight_bits`` (see the module docstring); a float model in eval mode on the CPU."""
    if name not in HYPERPARAMETERS:
        raise ValueError(f"fine-tunable models are {', '.join(sorted(HYPERPARAMETERS))}, not {name!r}")
    settings, hp = FINE_TUNING, HYPERPARAMETERS[name]
    model = copy.deepcopy(trained_model(name, log=log))
    layers = _weighted_modules(model, weight_bits)
    for module, bits in layers:
        parametrize.register_parametrization(module, "weight", _FakeQuantizedWeight(bits))
    split = data.dataset(name)
    torch.manual_seed(settings["seed"])
    loader = DataLoader(TensorDataset(split.x_train, split.y_train), batch_size=hp["batch_size"], shuffle=True,
                        generator=torch.Generator().manual_seed(settings["seed"]))
    optimizer = torch.optim.Adam(model.parameters(), lr=settings["lr"])
    start = time.perf_counter()
    with torch.enable_grad():
        for epoch in range(settings["epochs"]):
            model.train()
            for x, y in loader:
                loss = F.cross_entropy(model(x), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            log(f"  {name} fine-tuning epoch {epoch + 1}/{settings['epochs']}: loss {float(loss.detach()):.4f} "
                f"({time.perf_counter() - start:.1f} s)")
    for module, _ in layers:
        parametrize.remove_parametrizations(module, "weight", leave_parametrized=False)
    return model.eval()
