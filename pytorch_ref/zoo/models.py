"""The float models the product ships, as plain ``nn.Sequential`` networks."""
from __future__ import annotations

import torch
from torch import nn

#: Input shape (without batch) each model expects.
INPUT_SHAPES = {
    "linear": (1000,),
    "linear800": (800,),
    "mlp": (64,),
    "lenet": (1, 44, 44),
    "stem": (3, 32, 32),
    "dwsep": (8, 16, 16),
}


#: Weight widths a shipped model is quantized with unless told otherwise (8 bits where not
#: listed). LeNet's weights are 3.5 Mbit at 8 bits, more than ECP5-85F's block RAM; at 4
#: bits its held-out accuracy is the float model's (see the README's precision table).
DEFAULT_WEIGHT_BITS = {"lenet": "all=4"}


def linear_1000_10() -> nn.Sequential:
    """A single ``Linear(1000, 10)``: the first vertical slice."""
    return nn.Sequential(nn.Linear(1000, 10))


def linear_800_500() -> nn.Sequential:
    """``Linear(800, 500)``, the CNN's big dense layer alone: the benchmark's batch-1 case."""
    return nn.Sequential(nn.Linear(800, 500))


def mlp() -> nn.Sequential:
    """A small MLP on 8x8 digits: ``Linear(64, 32)``, ReLU, ``Linear(32, 10)``."""
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


def lenet() -> nn.Sequential:
    """The LeNet-style CNN; needs a 1x44x44 input (the third conv sees 5x5)."""
    return nn.Sequential(
        nn.Conv2d(1, 10, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(10, 20, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(20, 50, 5), nn.ReLU(),
        nn.Flatten(),
        nn.Linear(800, 500), nn.ReLU(),
        nn.Linear(500, 10),
    )


def conv_stem() -> nn.Sequential:
    """Conv 3->16 k3 pad 1, BatchNorm, ReLU, MaxPool k3 s2 p1 (on a 3x32x32 input)."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(3, stride=2, padding=1),
    )


def depthwise_separable(channels: int = 8, out_channels: int = 16) -> nn.Sequential:
    """Depthwise 3x3 (groups = channels) + BatchNorm + ReLU, then pointwise 1x1 + ReLU."""
    return nn.Sequential(
        nn.Conv2d(channels, channels, 3, padding=1, groups=channels), nn.BatchNorm2d(channels), nn.ReLU(),
        nn.Conv2d(channels, out_channels, 1), nn.ReLU(),
    )


BUILDERS = {
    "linear": linear_1000_10,
    "linear800": linear_800_500,
    "mlp": mlp,
    "lenet": lenet,
    "stem": conv_stem,
    "dwsep": depthwise_separable,
}


def build(name: str, seed: int = 0) -> nn.Sequential:
    """A model by name, with weights initialised from ``seed``."""
    if name not in BUILDERS:
        raise ValueError(f"model must be one of {', '.join(sorted(BUILDERS))}, not {name!r}")
    torch.manual_seed(seed)
    return BUILDERS[name]().eval()
