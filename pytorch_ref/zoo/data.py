"""Data sets: scikit-learn's bundled 8x8 digits (offline), and inputs for the blocks.

The digits (1,797 images, 16 grey levels) are split once, stratified, with a fixed
seed: :data:`TEST_FRACTION` held out. Pixels are scaled to [0, 1]. The MLP sees the 64
pixels; the CNN sees each image upscaled to 44x44 (bilinear). The blocks that are not
classifiers (``stem``, ``dwsep``) and the single ``linear`` layer get deterministic
inputs of their shape: upscaled digits for the stem, Gaussian noise otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

from pytorch_ref.zoo.models import INPUT_SHAPES

TEST_FRACTION = 0.2
SPLIT_SEED = 0
#: How many samples the non-digit inputs have in each split.
SYNTHETIC_SIZES = {"train": 256, "test": 64}


@dataclass(frozen=True)
class Split:
    """Float inputs and integer labels (``None`` where a model is not a classifier)."""
    x_train: torch.Tensor
    y_train: torch.Tensor | None
    x_test: torch.Tensor
    y_test: torch.Tensor | None


@lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    bunch = load_digits()
    images = (bunch.images / 16.0).astype(np.float32)            # [N, 8, 8] in [0, 1]
    return tuple(train_test_split(images, bunch.target.astype(np.int64), test_size=TEST_FRACTION,
                                  stratify=bunch.target, random_state=SPLIT_SEED))


def upscale(images: torch.Tensor, size: int) -> torch.Tensor:
    """``[N, 8, 8]`` to ``[N, 1, size, size]``, bilinear."""
    return F.interpolate(images.unsqueeze(1), size=(size, size), mode="bilinear", align_corners=False)


def digits(shape: tuple[int, ...]) -> Split:
    """The digits split with inputs of ``shape``: ``(64,)`` or ``(1, S, S)``."""
    x_train, x_test, y_train, y_test = (torch.from_numpy(a) for a in _digits())
    if tuple(shape) == (64,):
        return Split(x_train.flatten(1), y_train, x_test.flatten(1), y_test)
    if len(shape) == 3 and shape[0] == 1 and shape[1] == shape[2]:
        return Split(upscale(x_train, shape[1]), y_train, upscale(x_test, shape[1]), y_test)
    raise ValueError(f"digits come as (64,) or (1, S, S), not {shape!r}")


def _stem_inputs(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Digits upscaled to 32x32 on three channels, each with its own gain and noise."""
    x = upscale(images, 32).repeat(1, 3, 1, 1)
    gain = torch.tensor([1.0, 0.7, -0.5]).view(1, 3, 1, 1)
    return x * gain + 0.05 * torch.randn(x.shape, generator=generator)


def dataset(name: str) -> Split:
    """The inputs (and labels) for the model ``name`` of :mod:`pytorch_ref.zoo.models`."""
    if name in ("mlp", "lenet"):
        return digits(INPUT_SHAPES[name])
    if name not in INPUT_SHAPES:
        raise ValueError(f"model must be one of {', '.join(sorted(INPUT_SHAPES))}, not {name!r}")
    generator = torch.Generator().manual_seed(SPLIT_SEED)
    if name == "stem":
        x_train, x_test, _, _ = (torch.from_numpy(a) for a in _digits())
        n_train, n_test = SYNTHETIC_SIZES["train"], SYNTHETIC_SIZES["test"]
        return Split(_stem_inputs(x_train[:n_train], generator), None,
                     _stem_inputs(x_test[:n_test], generator), None)
    shape = INPUT_SHAPES[name]
    return Split(torch.randn((SYNTHETIC_SIZES["train"], *shape), generator=generator), None,
                 torch.randn((SYNTHETIC_SIZES["test"], *shape), generator=generator), None)
