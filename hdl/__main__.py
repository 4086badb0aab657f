"""``python -m hdl verilog|vhdl``: write the accelerator for a shipped model as Verilog or VHDL.

The command-line layer on top of :func:`hdl.build.build_top`: it takes the model
trained (or loaded from the cache) and quantized by :mod:`pytorch_ref.zoo.train`. From
Python, ``build_top(quantized_model, AcceleratorConfig(...))`` takes any model.
"""
from __future__ import annotations

import argparse
import sys

from pytorch_ref.zoo import models
from pytorch_ref.zoo.train import quantize_trained

from hdl.config import AcceleratorConfig
from hdl.build import build_top
from hdl.writers import to_verilog, to_vhdl, write_atomically


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hdl", description=__doc__)
    parser.add_argument("language", choices=("verilog", "vhdl"))
    parser.add_argument("--model", default="lenet", choices=sorted(models.BUILDERS))
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--cols", type=int, default=8)
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv)
    try:
        config = AcceleratorConfig(rows=args.rows, cols=args.cols)
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    model = quantize_trained(args.model).quantized
    top = build_top(model, config)
    text = to_verilog(top) if args.language == "verilog" else to_vhdl(top)
    write_atomically(args.output, text)
    print(f"wrote {args.output}: {args.model} on a {args.rows}x{args.cols} array, "
          f"{len(text.encode()) / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
