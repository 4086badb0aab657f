"""``python -m hdl verilog|vhdl``: write the accelerator for a model as Verilog or VHDL.

The command-line layer on top of :func:`hdl.build.build_top`. The model is either a
shipped one (``--model NAME``: trained, or loaded from the cache, and quantized by
:mod:`pytorch_ref.zoo.train`, which needs torch) or a quantized model saved to a file
(``--model-file PATH``, see :mod:`pytorch_ref.ir.serialize`), which needs only NumPy and
Amaranth: torch is not imported. ``python -m hdl save-model --model NAME -o FILE.npz``
writes such a file for a shipped model; from Python, ``save_model(quantized_model, path)``
does it for any model, and ``build_top(quantized_model, AcceleratorConfig(...))`` takes
any model directly.
"""
from __future__ import annotations

import argparse
import sys

from hdl.build import build_top
from hdl.config import REQUANTIZER_MULTIPLIERS, AcceleratorConfig
from hdl.gateware.axi.frame_shape import TDATA_BITS
from hdl.gateware.axi.top import TOP_NAME as AXI_TOP_NAME
from hdl.writers import TOP_NAME, to_verilog, to_vhdl, write_atomically
from hdl.writers.register_map import c_header, python_module
from pytorch_ref.frontends.precision import WEIGHT_BITS_HELP
from pytorch_ref.ir.atomic_file import check_output_path
from pytorch_ref.ir.serialize import load_model, save_model

DEFAULT_MODEL = "lenet"
_MODEL_HELP = f"a shipped model of pytorch_ref.zoo.models, e.g. lenet or mlp (default {DEFAULT_MODEL}); needs torch"


def shipped_model(parser: argparse.ArgumentParser, name: str, weight_bits: str | None = None):
    """The quantized shipped model ``name``, its weights at ``weight_bits`` (imports torch;
    trains on a cache miss)."""
    from pytorch_ref.zoo import models
    if name not in models.BUILDERS:
        parser.error(f"argument --model: invalid choice: {name!r} (choose from {', '.join(sorted(models.BUILDERS))})")
    from pytorch_ref.zoo.train import quantize_trained
    try:
        return quantize_trained(name, weight_bits=weight_bits).quantized
    except ValueError as error:                         # a bad --weight-bits (the others are bugs)
        parser.error(str(error))


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser and, by command name, its subcommands' parsers (for their error messages)."""
    parser = argparse.ArgumentParser(prog="python -m hdl", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{verilog,vhdl,registers,save-model}")
    for language, title in (("verilog", "Verilog"), ("vhdl", "VHDL")):
        writer = commands.add_parser(language, help=f"write the accelerator as {title}")
        source = writer.add_mutually_exclusive_group()
        source.add_argument("--model", default=DEFAULT_MODEL, metavar="NAME", help=_MODEL_HELP)
        source.add_argument("--model-file", metavar="PATH",
                            help="a quantized model written by save-model or pytorch_ref.ir.serialize.save_model")
        writer.add_argument("--weight-bits", metavar="SPEC", help=WEIGHT_BITS_HELP + " (with --model)")
        writer.add_argument("--rows", type=int, default=8)
        writer.add_argument("--cols", type=int, default=8)
        writer.add_argument("--requantizer-multipliers", choices=REQUANTIZER_MULTIPLIERS, default="dsp",
                            help="the requantizer's products on DSP blocks (default: one 18x18 a column, "
                                 "the rest in logic) or in logic only (then the array has every DSP block)")
        writer.add_argument("--runtime-weights", action="store_true",
                            help="weights, biases and requantization loadable at run time (weights_* ports; "
                                 "s_axis_weights with --axi)")
        writer.add_argument("--axi", action="store_true",
                            help="write neural_network_accelerator_axi: AXI4-Stream data, AXI4-Lite registers, "
                                 "an interrupt (see the README's register map)")
        writer.add_argument("--tdata-bits", type=int, default=32, metavar="N",
                            help=f"with --axi: s_axis TDATA width, one of {', '.join(map(str, TDATA_BITS))} (default 32)")
        writer.add_argument("--output-tdata-bits", type=int, default=None, metavar="N",
                            help="with --axi: m_axis TDATA width (default: --tdata-bits)")
        writer.add_argument("-o", "--output", required=True)
        writer.add_argument("--allow-large", action="store_true",
                            help="generate a design over the on-chip memory limit (hdl.build.MEMORY_LIMIT_BITS)")
    header = commands.add_parser("registers", help="write the AXI4-Lite register map as a C header or Python module")
    header.add_argument("--language", choices=("c", "python"), required=True)
    header.add_argument("-o", "--output", required=True)
    saver = commands.add_parser("save-model", help="save a shipped model, quantized, for --model-file")
    saver.add_argument("--model", default=DEFAULT_MODEL, metavar="NAME", help=_MODEL_HELP)
    saver.add_argument("--weight-bits", metavar="SPEC", help=WEIGHT_BITS_HELP)
    saver.add_argument("-o", "--output", required=True, help="the .npz file to write")
    return parser, commands.choices


def main(argv=None) -> int:
    parser, commands = _parser()
    args = parser.parse_args(argv)
    command = commands[args.command]
    try:
        check_output_path(args.output)
    except ValueError as error:
        command.error(str(error))
    if args.command == "registers":
        text = c_header() if args.language == "c" else python_module()
        try:
            write_atomically(args.output, text)
        except (OSError, ValueError) as error:
            command.error(f"cannot write {args.output!r}: {error}")
        print(f"wrote {args.output}: the register map as {'C' if args.language == 'c' else 'Python'}")
        return 0
    if args.command == "save-model":
        model = shipped_model(command, args.model, args.weight_bits)
        try:
            save_model(model, args.output)
        except (OSError, ValueError) as error:
            command.error(f"cannot write {args.output!r}: {error}")
        print(f"wrote {args.output}: {model.name}, {len(model.layers)} layers")
        return 0
    if not args.axi and (args.output_tdata_bits is not None or args.tdata_bits != 32):
        command.error("--tdata-bits and --output-tdata-bits apply to --axi")
    try:
        config = AcceleratorConfig(rows=args.rows, cols=args.cols,
                                   requantizer_multipliers=args.requantizer_multipliers,
                                   runtime_weights=args.runtime_weights)
    except (TypeError, ValueError) as error:
        command.error(str(error))
    if args.model_file is not None:
        if args.weight_bits is not None:
            command.error("--weight-bits applies to --model; a --model-file keeps the widths it was saved with")
        try:
            model = load_model(args.model_file)
        except (OSError, ValueError) as error:
            command.error(str(error))
    else:
        model = shipped_model(command, args.model, args.weight_bits)
    axi_bits = (args.tdata_bits, args.output_tdata_bits or args.tdata_bits) if args.axi else None
    try:
        top = build_top(model, config, allow_large=args.allow_large, axi_tdata_bits=axi_bits)
    except (TypeError, ValueError) as error:             # the model does not fit this configuration
        command.error(str(error))
    name = AXI_TOP_NAME if args.axi else TOP_NAME
    text = to_verilog(top, name) if args.command == "verilog" else to_vhdl(top, name)
    try:
        write_atomically(args.output, text)
    except (OSError, ValueError) as error:
        command.error(f"cannot write {args.output!r}: {error}")
    print(f"wrote {args.output}: {model.name} on a {args.rows}x{args.cols} array{' in its AXI wrapper' if args.axi else ''}, "
          f"{len(text.encode()) / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
