"""Differential fuzzing of the whole pipeline: a seed draws a model and a configuration.

A seed draws, with :class:`random.Random` only (so a seed means the same case on every
machine):

* a float model: a chain of Conv2d (random channels, kernels, strides, padding, some
  depthwise, some without bias), BatchNorm2d with random statistics, ReLU and MaxPool2d,
  then Flatten and one or two Linear layers; or a chain of Linear layers;
* calibration data with a random offset and spread, hence random zero points;
* an array of 1 to 9 rows and columns (odd shapes such as 3x5 and 7x9 included), a random
  accumulator depth, input bus and batch, and the narrowest accumulator width that
  lowering proves safe for the model, or up to 3 bits more.

The model is quantized, run on the integer reference, lowered, simulated and compared
exactly. ``python -m sim.fuzz --seed N`` reruns case ``N`` alone.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import random
import sys
from pathlib import Path

import torch
from torch import nn

from hdl.compiler.program import lower
from hdl.config import AcceleratorConfig
from pytorch_ref.frontends.float_model import quantize_model
from sim.cases import Case, make_case


def _conv_block(rng: random.Random, channels: int, height: int, width: int, layers: list, notes: list):
    out_channels = rng.randint(1, 9)
    kernel = rng.randint(1, min(3, height, width))
    stride = rng.randint(1, 2)
    padding = rng.randint(0, kernel // 2)
    groups = channels if channels > 1 and out_channels % channels == 0 and rng.random() < 0.3 else 1
    layers.append(nn.Conv2d(channels, out_channels, kernel, stride=stride, padding=padding, groups=groups,
                            bias=rng.random() < 0.8))
    notes.append(f"conv{kernel}x{kernel}/{stride} p{padding} {channels}->{out_channels}"
                 + (f" g{groups}" if groups > 1 else ""))
    height, width = (height + 2 * padding - kernel) // stride + 1, (width + 2 * padding - kernel) // stride + 1
    if rng.random() < 0.5:
        norm = nn.BatchNorm2d(out_channels)
        with torch.no_grad():
            norm.running_mean.uniform_(-1, 1)
            norm.running_var.uniform_(0.25, 4)
            norm.weight.uniform_(-2, 2)
            norm.bias.uniform_(-1, 1)
        layers.append(norm)
        notes.append("bn")
    if rng.random() < 0.7:
        layers.append(nn.ReLU())
        notes.append("relu")
    if rng.random() < 0.4 and min(height, width) >= 2:
        kernel = rng.randint(2, min(3, height, width))
        stride = rng.randint(1, kernel)
        padding = rng.randint(0, kernel // 2)
        layers.append(nn.MaxPool2d(kernel, stride=stride, padding=padding))
        notes.append(f"maxpool{kernel}/{stride} p{padding}")
        height, width = (height + 2 * padding - kernel) // stride + 1, (width + 2 * padding - kernel) // stride + 1
    return out_channels, height, width


def random_float_model(rng: random.Random) -> tuple[nn.Sequential, tuple[int, ...], str]:
    """A random supported model, its input shape and a one-line description."""
    layers, notes = [], []
    if rng.random() < 0.7:
        channels, height, width = rng.randint(1, 4), rng.randint(4, 10), rng.randint(4, 10)
        shape = (channels, height, width)
        for _ in range(rng.randint(1, 2)):
            channels, height, width = _conv_block(rng, channels, height, width, layers, notes)
        layers.append(nn.Flatten())
        features = channels * height * width
    else:
        features = rng.randint(1, 64)
        shape = (features,)
    for index in range(rng.randint(1, 2)):
        out_features = rng.randint(1, 12)
        layers.append(nn.Linear(features, out_features))
        notes.append(f"fc {features}->{out_features}")
        features = out_features
        if index == 0 and rng.random() < 0.5:
            layers.append(nn.ReLU())
            notes.append("relu")
    return nn.Sequential(*layers).eval(), shape, " ".join(notes)


def random_config(rng: random.Random) -> dict:
    rows, cols = rng.randint(1, 9), rng.randint(1, 9)
    lanes = math.lcm(rows, cols)
    return {"rows": rows, "cols": cols, "accumulator_depth": rng.choice([2, 5, 16, 64, 256]),
            "input_bus_bits": 8 * lanes * rng.choice([1, 2, 3])}


@dataclasses.dataclass
class FuzzCase:
    seed: int
    description: str
    case: Case


def fuzz_case(seed: int, inferences: int = 2) -> FuzzCase:
    """Case ``seed``: everything is drawn from the seed."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    model, shape, description = random_float_model(rng)
    calibration = torch.randn((64,) + shape) * rng.uniform(0.5, 3) + rng.uniform(-1, 1)
    quantized = quantize_model(model, calibration, name=f"fuzz{seed}")
    config = random_config(rng)
    batch = rng.choice([1, 1, 2])
    need = lower(quantized, AcceleratorConfig(**config, accumulator_bits=48), batch).accumulator_bits_needed
    config["accumulator_bits"] = min(48, max(17, need + rng.randint(0, 3)))
    config = AcceleratorConfig(**config)
    inputs = torch.randn((inferences * batch,) + shape) * rng.uniform(0.5, 4) + rng.uniform(-1, 1)
    case = make_case(quantized, config, inputs, batch)
    summary = (f"seed {seed}: {description}; input {shape}; {config.rows}x{config.cols} array, "
               f"accumulator {config.accumulator_bits} bits (needs {need}) x {config.accumulator_depth}, "
               f"bus {config.input_bus_bits} bits, batch {batch}")
    return FuzzCase(seed, summary, case)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.fuzz", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, action="append", required=True, help="case to run (repeatable)")
    parser.add_argument("--simulator", default="verilator")
    parser.add_argument("--build-dir", default="build/fuzz")
    args = parser.parse_args(argv)
    from sim.runner import simulate
    failed = 0
    for seed in args.seed:
        fuzz = fuzz_case(seed)
        print(fuzz.description, flush=True)
        case = fuzz.case
        report = simulate(case.program, case.inputs, case.expected, simulator=args.simulator,
                          build_dir=Path(args.build_dir) / f"seed{seed}_{args.simulator}", seed=seed)
        bad = [r for r in report.results if not r["match"]]
        print(f"  {'MISMATCH ' + str(bad[0]) if bad else 'exact'}, "
              f"{report.results[0]['cycles']} cycles per inference", flush=True)
        failed += bool(bad)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
