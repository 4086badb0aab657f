"""``python -m sim``: build the accelerator for a model, simulate inputs, check them exactly.

Prints, per input, whether the hardware output equals the integer reference, the cycles
per inference and the utilization; exits non-zero on any mismatch.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hdl.config import AcceleratorConfig
from pytorch_ref.zoo.models import BUILDERS

from pytorch_ref.frontends.precision import WEIGHT_BITS_HELP
from sim.cases import trained_case
from sim.report import print_report
from sim.runner import SIMULATORS, simulate, waves_path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__)
    parser.add_argument("--model", default="lenet", choices=sorted(BUILDERS))
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--cols", type=int, default=8)
    parser.add_argument("--simulator", default="verilator", choices=SIMULATORS)
    parser.add_argument("--inputs", type=int, default=16, help="number of inputs to simulate")
    parser.add_argument("--seed", type=int, default=0, help="seed of the stream stalls")
    parser.add_argument("--build-dir", default="build/sim")
    parser.add_argument("--weight-bits", default=None, metavar="SPEC", help=WEIGHT_BITS_HELP)
    parser.add_argument("--waves", action="store_true",
                        help="record waveforms in the build folder: FST (Verilator), VCD (Icarus), GHW (GHDL)")
    args = parser.parse_args(argv)
    try:
        config = AcceleratorConfig(rows=args.rows, cols=args.cols)
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    if args.inputs < 1:
        parser.error(f"inputs must be a positive integer, not {args.inputs}")
    build_dir = Path(args.build_dir) / f"{args.model}_{args.rows}x{args.cols}_{args.simulator}"
    try:
        build_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        parser.error(f"cannot use --build-dir {args.build_dir!r}: {error}")
    print(f"[1/3] training or loading {args.model}, quantizing, compiling for a {args.rows}x{args.cols} array",
          flush=True)
    try:
        case = trained_case(args.model, config, args.inputs, weight_bits=args.weight_bits)
    except ValueError as error:
        parser.error(str(error))
    print(f"[2/3] generating HDL and building with {args.simulator} in {build_dir}", flush=True)
    report = simulate(case.program, case.inputs, case.expected, simulator=args.simulator,
                      build_dir=build_dir, seed=args.seed, waves=args.waves)
    print(f"[3/3] simulated {len(report.results)} inputs", flush=True)
    print_report(case, report)
    if args.waves:
        path = waves_path(args.simulator, build_dir)
        print(f"waveforms: {path} ({path.stat().st_size / 1e6:.1f} MB); open with `gtkwave {path}` or `surfer {path}`"
              if path.exists() else f"waveforms: {path} was not written")
    return 0 if report.all_match else 1


if __name__ == "__main__":
    sys.exit(main())
