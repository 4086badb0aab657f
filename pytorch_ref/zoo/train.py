"""Training on the digits, cached checkpoints, and the compiled models the other sides use.

The public entry points, for every model of :mod:`pytorch_ref.zoo.models`:

* :func:`trained_model` -- the float model: trained on the digits (``mlp``, ``lenet``),
  or seeded weights with non-trivial BatchNorm statistics (``linear``, ``stem``,
  ``dwsep``, which are not classifiers of any data we have);
* :func:`quantize_trained` -- a :class:`Compiled`: the float model, its
  :class:`QuantizedModel` calibrated on the training split, and the held-out inputs as
  floats and as int8 codes, with labels where there are any;
* :func:`accuracy_report` -- float and int8 (integer reference) accuracy on the held-out split.

Trained weights are cached in ``build/checkpoints/`` under a key hashing the code that
defines them (``models.py``, ``train.py``, ``data.py``) and the hyperparameters; a
change to either retrains. Checkpoints are written atomically (temporary file, then
rename) under a file lock, so parallel test workers train once.

Training picks CUDA when present, with mixed precision (autocast + GradScaler), pinned
memory and loader workers there; on the CPU it runs in float32 in the main process.
``python -m pytorch_ref.zoo.train [names]`` trains and prints the reports.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pytorch_ref.zoo import data, models
from pytorch_ref.ir import integer_semantics as sem
from pytorch_ref.frontends.float_model import quantize_model
from pytorch_ref.frontends.precision import WeightBitsSpec
from pytorch_ref.ir.quantized_model import QuantizedModel
from pytorch_ref.reference import run_integer_reference

__all__ = ["HYPERPARAMETERS", "Compiled", "checkpoint_path", "train", "trained_model", "quantize_trained", "compile_float",
           "accuracy_report"]

#: Training settings of the classifiers; part of the checkpoint key.
HYPERPARAMETERS = {
    "mlp": dict(epochs=60, batch_size=32, lr=1e-2, weight_decay=1e-4, seed=0),
    "lenet": dict(epochs=15, batch_size=32, lr=2e-3, weight_decay=0.0, seed=0),
}
#: Where checkpoints live: ``$NNACCEL_CHECKPOINTS`` or the repository's build/checkpoints.
CHECKPOINT_DIR = Path(os.environ.get("NNACCEL_CHECKPOINTS",
                                     Path(__file__).resolve().parents[2] / "build" / "checkpoints"))
_SOURCES = ("models.py", "train.py", "data.py")
Log = Callable[[str], None]


def _device(device) -> torch.device:
    return torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")


def checkpoint_path(name: str) -> Path:
    """The checkpoint file for ``name`` under the current code and hyperparameters."""
    digest = hashlib.sha256()
    for source in _SOURCES:
        digest.update((Path(__file__).parent / source).read_bytes())
    digest.update(json.dumps({"name": name, **HYPERPARAMETERS[name]}, sort_keys=True).encode())
    return CHECKPOINT_DIR / f"{name}-{digest.hexdigest()[:16]}.pt"


@torch.no_grad()
def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> float:
    model.eval()
    predictions = torch.cat([model(batch.to(device)).argmax(1).cpu() for batch in x.split(512)])
    return float((predictions == y).float().mean())


def train(name: str, device=None, log: Log = print) -> nn.Module:
    """Train the classifier ``name`` (``mlp`` or ``lenet``) from scratch; returns it on the CPU."""
    if name not in HYPERPARAMETERS:
        raise ValueError(f"trainable models are {', '.join(sorted(HYPERPARAMETERS))}, not {name!r}")
    hp = HYPERPARAMETERS[name]
    device = _device(device)
    cuda = device.type == "cuda"
    split = data.dataset(name)
    model = models.build(name, seed=hp["seed"]).to(device)
    workers = min(4, (os.cpu_count() or 1) // 2) if cuda else 0   # in-memory tensors: workers only pay off on GPU
    loader = DataLoader(TensorDataset(split.x_train, split.y_train), batch_size=hp["batch_size"], shuffle=True,
                        generator=torch.Generator().manual_seed(hp["seed"]), num_workers=workers,
                        pin_memory=cuda, persistent_workers=workers > 0)
    optimizer = torch.optim.Adam(model.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=hp["lr"], epochs=hp["epochs"],
                                                   steps_per_epoch=len(loader))
    scaler = torch.amp.GradScaler("cuda", enabled=cuda)
    log(f"training {name} on {device} for {hp['epochs']} epochs of {len(split.x_train)} samples")
    start = time.perf_counter()
    with torch.enable_grad():
        _epochs(name, model, loader, optimizer, schedule, scaler, split, hp, device, log, start)
    return model.cpu().eval()


def _epochs(name, model, loader, optimizer, schedule, scaler, split, hp, device, log, start):
    cuda = device.type == "cuda"
    for epoch in range(hp["epochs"]):
        model.train()
        total, count = torch.zeros((), device=device), 0     # summed on the device: no sync per step
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.float16, enabled=cuda):
                loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            schedule.step()
            total += loss.detach().float() * len(y)
            count += len(y)
        accuracy = _accuracy(model, split.x_test, split.y_test, device)
        log(f"  {name} epoch {epoch + 1}/{hp['epochs']}: loss {float(total) / count:.4f}, "
            f"held-out accuracy {accuracy:.2%} ({time.perf_counter() - start:.1f} s)")


def _save_atomic(state: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            torch.save(state, file)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


@torch.no_grad()
def _block_with_statistics(name: str) -> nn.Module:
    """A seeded block whose BatchNorms hold real statistics (train-mode passes over the
    training inputs) and random affine parameters, so folding is exercised for real."""
    model = models.build(name, seed=0)
    generator = torch.Generator().manual_seed(1)
    batchnorms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for bn in batchnorms:
        bn.reset_running_stats()
        bn.momentum = None                      # cumulative average over the passes
    model.train()
    for batch in data.dataset(name).x_train.split(64):
        model(batch)
    for bn in batchnorms:
        bn.weight.copy_(torch.empty(bn.num_features).uniform_(0.5, 1.5, generator=generator))
        bn.bias.copy_(0.2 * torch.randn(bn.num_features, generator=generator))
    return model.eval()


def trained_model(name: str, device=None, retrain: bool = False, log: Log = print) -> nn.Module:
    """The float model ``name`` in eval mode on the CPU (see the module docstring)."""
    if name not in HYPERPARAMETERS:
        if name in ("stem", "dwsep"):
            return _block_with_statistics(name)
        return models.build(name, seed=0)
    path = checkpoint_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)        # one trainer per checkpoint; the others wait and load
        if retrain or not path.exists():
            _save_atomic(train(name, device=device, log=log).state_dict(), path)
            log(f"saved {path}")
    model = models.build(name)
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return model.eval()


@dataclass(frozen=True)
class Compiled:
    """A model ready for the hardware side and for checking it."""
    name: str
    float_model: nn.Module
    quantized: QuantizedModel
    x_test: torch.Tensor                # held-out float inputs [N, *input_shape]
    x_codes: torch.Tensor               # the same as int8 codes, quantized with the model's input_quant
    y_test: torch.Tensor | None         # labels; None where the model is no classifier of its data


def quantize_trained(name: str, device=None, log: Log = print, weight_bits: WeightBitsSpec = None) -> Compiled:
    """The float model, its :class:`QuantizedModel` (calibrated with min/max observers on
    the training split, weights at ``weight_bits``, by default the model's
    :data:`~pytorch_ref.zoo.models.DEFAULT_WEIGHT_BITS`: see :mod:`pytorch_ref.frontends.precision`)
    and the held-out inputs and labels."""
    model = trained_model(name, device=device, log=log)
    return compile_float(name, model, models.DEFAULT_WEIGHT_BITS.get(name) if weight_bits is None else weight_bits)


def compile_float(name: str, model: nn.Module, weight_bits: WeightBitsSpec = None) -> Compiled:
    """:class:`Compiled` of a float model of the zoo's ``name`` (its data), weights at ``weight_bits``."""
    split = data.dataset(name)
    quantized = quantize_model(model, split.x_train, name=name, weight_bits=weight_bits)
    q = quantized.input_quant
    return Compiled(name, model, quantized, split.x_test,
                    sem.quantize_activation(split.x_test, q.scale, q.zero_point), split.y_test)


def accuracy_report(name: str, compiled: Compiled | None = None, device=None) -> dict:
    """Float and int8 results on the held-out split.

    Keys: ``samples``; for classifiers ``float_accuracy`` and ``int8_accuracy``;
    always ``same_prediction`` (argmax of int8 == argmax of float, for 1-D outputs) and
    ``max_error`` / ``mean_error``: |dequantized int8 - float| in output codes (LSBs).
    """
    c = compiled or quantize_trained(name, device=device)
    with torch.no_grad():
        expected = torch.cat([c.float_model(batch) for batch in c.x_test.split(256)])
    codes = run_integer_reference(c.quantized, c.x_codes, device=device)
    out = c.quantized.output_quant
    error = (sem.dequantize_activation(codes, out.scale, out.zero_point) - expected).abs() / out.scale
    report = dict(model=name, samples=len(c.x_test), max_error=float(error.max()), mean_error=float(error.mean()))
    if codes.dim() == 2:
        report["same_prediction"] = float((codes.argmax(1) == expected.argmax(1)).float().mean())
    if c.y_test is not None:
        report["float_accuracy"] = float((expected.argmax(1) == c.y_test).float().mean())
        report["int8_accuracy"] = float((codes.argmax(1) == c.y_test).float().mean())
    return report


def main(argv: list[str] | None = None) -> None:
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=sorted(models.BUILDERS))
    parser.add_argument("--retrain", action="store_true")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    for name in args.names:
        start = time.perf_counter()
        if args.retrain and name in HYPERPARAMETERS:
            trained_model(name, retrain=True)
        report = accuracy_report(name)
        print(json.dumps(report), f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
