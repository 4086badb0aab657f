"""The float models the product ships: ``nn.Sequential`` chains, and ResNet-8's residual graph."""
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
    "dscnn": (1, 49, 10),
    "autoencoder": (640,),
    "resnet8": (3, 32, 32),
    "mobilenet": (3, 96, 96),
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


def ds_cnn(channels: int = 64, blocks: int = 4, classes: int = 12) -> nn.Sequential:
    """MLPerf Tiny keyword spotting, DS-CNN: 49x10 MFCC frames, a 10x4 stride-2 convolution
    to 25x5x64, four depthwise-separable blocks (depthwise 3x3 and pointwise 1x1, each with
    BatchNorm and ReLU), average pooling over the whole 25x5 map and a 12-way classifier.
    The reference's 'same' padding of the first convolution is asymmetric; (5, 1) gives its
    25x5 output."""
    layers = [nn.Conv2d(1, channels, (10, 4), stride=2, padding=(5, 1)), nn.BatchNorm2d(channels), nn.ReLU(),
              nn.Dropout(0.2)]
    for _ in range(blocks):
        layers += [nn.Conv2d(channels, channels, 3, padding=1, groups=channels), nn.BatchNorm2d(channels), nn.ReLU(),
                   nn.Conv2d(channels, channels, 1), nn.BatchNorm2d(channels), nn.ReLU()]
    layers += [nn.Dropout(0.4), nn.AvgPool2d((25, 5)), nn.Flatten(), nn.Linear(channels, classes)]
    return _randomise_batchnorm(nn.Sequential(*layers))


def fc_autoencoder(inputs: int = 640, hidden: int = 128, bottleneck: int = 8) -> nn.Sequential:
    """MLPerf Tiny anomaly detection: a fully connected autoencoder of 640 inputs (5 frames of
    128 log-mel bins), four 128-unit layers, an 8-unit bottleneck, four 128-unit layers, each
    with BatchNorm and ReLU, and a 640-unit output."""
    layers, width = [], inputs
    for units in [hidden] * 4 + [bottleneck] + [hidden] * 4:
        layers += [nn.Linear(width, units), nn.BatchNorm1d(units), nn.ReLU()]
        width = units
    layers.append(nn.Linear(width, inputs))
    return _randomise_batchnorm(nn.Sequential(*layers))


class ResidualBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm (ReLU between them), added to the block's input,
    then ReLU. Where the block changes the channels or the stride, the input passes a 1x1
    convolution of that stride first (the shortcut)."""

    def __init__(self, channels: int, out_channels: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, out_channels, 3, stride=stride, padding=1)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut = (nn.Conv2d(channels, out_channels, 1, stride=stride)
                         if stride != 1 or channels != out_channels else nn.Identity())

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(self.shortcut(x) + y)


class ResNet8(nn.Module):
    """MLPerf Tiny image classification, ResNet-8 (CIFAR-10 shape, 3x32x32): a 3x3
    convolution to 16 channels, three residual blocks of 16, 32 and 64 channels (the last
    two of stride 2, with 1x1 convolutions on their shortcuts), average pooling over the
    whole 8x8 map and a 10-way classifier. The reference's 'same' padding of a stride-2
    convolution is asymmetric (none before, one after); padding 1 gives the same shapes."""

    def __init__(self, classes: int = 10, widths: tuple[int, ...] = (16, 32, 64)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, padding=1), nn.BatchNorm2d(widths[0]), nn.ReLU())
        blocks, channels = [], widths[0]
        for index, width in enumerate(widths):
            blocks.append(ResidualBlock(channels, width, stride=1 if index == 0 else 2))
            channels = width
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(channels, classes)

    def forward(self, x):
        return self.classifier(self.pool(self.blocks(self.stem(x))).flatten(1))


def resnet8() -> nn.Module:
    return _randomise_batchnorm(ResNet8())


#: MobileNetV1's depthwise-separable blocks at width 1: (pointwise output channels, depthwise stride).
MOBILENET_V1_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
                       (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))


def mobilenet_v1(width: float = 0.25, classes: int = 2, blocks: int = len(MOBILENET_V1_BLOCKS)) -> nn.Sequential:
    """MLPerf Tiny visual wake words, MobileNetV1 at ``width`` (0.25: 8 to 256 channels) on a
    3x96x96 image: a 3x3 stride-2 convolution, the first ``blocks`` of MobileNetV1's 13
    depthwise-separable blocks (depthwise 3x3 and pointwise 1x1, each with BatchNorm and
    ReLU), global average pooling and a ``classes``-way classifier. Fewer ``blocks`` give
    the scaled-down variants the fast tests run."""
    if not 1 <= blocks <= len(MOBILENET_V1_BLOCKS):
        raise ValueError(f"blocks must be between 1 and {len(MOBILENET_V1_BLOCKS)}, not {blocks!r}")
    channels = int(32 * width)
    layers = [nn.Conv2d(3, channels, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU()]
    for out_channels, stride in MOBILENET_V1_BLOCKS[:blocks]:
        out_channels = int(out_channels * width)
        layers += [nn.Conv2d(channels, channels, 3, stride=stride, padding=1, groups=channels, bias=False),
                   nn.BatchNorm2d(channels), nn.ReLU(),
                   nn.Conv2d(channels, out_channels, 1, bias=False), nn.BatchNorm2d(out_channels), nn.ReLU()]
        channels = out_channels
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, classes)]
    return _randomise_batchnorm(nn.Sequential(*layers))


def _randomise_batchnorm(model: nn.Module) -> nn.Module:
    """Seeded running statistics and affine parameters, so that folding has work to do."""
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            with torch.no_grad():
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.8, 1.2)
                m.bias.uniform_(-0.1, 0.1)
    return model


BUILDERS = {
    "linear": linear_1000_10,
    "linear800": linear_800_500,
    "mlp": mlp,
    "lenet": lenet,
    "stem": conv_stem,
    "dwsep": depthwise_separable,
    "dscnn": ds_cnn,
    "autoencoder": fc_autoencoder,
    "resnet8": resnet8,
    "mobilenet": mobilenet_v1,
}


def build(name: str, seed: int = 0) -> nn.Module:
    """A model by name, with weights initialised from ``seed``."""
    if name not in BUILDERS:
        raise ValueError(f"model must be one of {', '.join(sorted(BUILDERS))}, not {name!r}")
    torch.manual_seed(seed)
    return BUILDERS[name]().eval()
