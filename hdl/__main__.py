"""``python -m hdl verilog|vhdl``: write the accelerator for a model as Verilog or VHDL."""
from __future__ import annotations

import argparse
import sys

import torch

from pytorch_ref import models, quantize

from .config import AcceleratorConfig
from .generate import build_top, to_verilog, to_vhdl, write_atomically


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hdl", description=__doc__)
    parser.add_argument("language", choices=("verilog", "vhdl"))
    parser.add_argument("--model", default="linear", choices=sorted(models.BUILDERS))
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--cols", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv)
    try:
        config = AcceleratorConfig(rows=args.rows, cols=args.cols)
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    float_model = models.build(args.model, seed=args.seed)
    calibration = torch.randn((256,) + models.INPUT_SHAPES[args.model],
                              generator=torch.Generator().manual_seed(args.seed + 1))
    model = quantize.quantize_sequential(float_model, calibration, args.model)
    top = build_top(model, config)
    text = to_verilog(top) if args.language == "verilog" else to_vhdl(top)
    write_atomically(args.output, text)
    print(f"wrote {args.output}: {args.model} on a {args.rows}x{args.cols} array, "
          f"{len(text.encode()) / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
