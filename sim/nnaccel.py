"""``nnaccel``: your own PyTorch model to an accelerator, checked, in three commands.

  nnaccel compile MODEL --calibration DATA -o FOLDER [--rows R --cols C ...]
  nnaccel sim FOLDER [--simulator verilator|icarus|ghdl]
  nnaccel estimate FOLDER [--seed N] [--what-if bram-output-registers] [--units [NAMES]]
  nnaccel weights FOLDER MODEL --calibration DATA -o IMAGE.bin   (--runtime-weights designs)

MODEL is a ``torch.export`` program file (``.pt2``, from ``torch.export.save``), a
TorchScript file of a scripted ``nn.Sequential`` (``.pt``/``.ts``/``.jit``, from
``torch.jit.save``), or ``package.module:factory``, a function that returns the model (a
float ``nn.Module``, one torch.ao eager mode has quantized, or a graph torchao's
``convert_pt2e`` quantized; a ``.pt2`` file of such a graph works too). DATA is a float array
``[N, *input_shape]`` in a ``.npy`` or ``.pt`` file: it calibrates the activations of a
float model, and its first ``--vectors`` samples become the test vectors.

``compile`` writes FOLDER (all or nothing): the accelerator in Verilog and VHDL, its AXI
wrapper in both, the register map as a C header and a Python module, a FuseSoC core file,
``report.json`` (layers, MACs, predicted cycles, memory bits), the quantized model
(``model.npz``), the design's options (``design.json``) and the test vectors with their
reference outputs (``vectors.npz``). ``sim`` simulates the vectors and checks them
exactly; ``estimate`` synthesizes, places and routes the accelerator for an ECP5. For a
design compiled with ``--runtime-weights``, ``weights`` turns another model of the same
layer shapes (retrained, say) into a weight image to load at run time (``s_axis_weights``).
Errors are one line and a non-zero exit.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from hdl.tools.fpga_estimate import WHAT_IF

DESIGN_FILE, MODEL_FILE, VECTORS_FILE, REPORT_FILE = "design.json", "model.npz", "vectors.npz", "report.json"
DESIGN_FORMAT = "nnaccel-design"


class UserError(Exception):
    """A problem with the user's input: printed as one line, exit status 2."""


def _progress(step: int, steps: int, text: str):
    print(f"[{step}/{steps}] {text}", flush=True)


def _load_module(source: str):
    """The model named by ``source`` (see the module docstring)."""
    import torch
    from pytorch_ref.frontends.saved_models import load_torchscript, model_from_exported
    path = Path(source)
    if path.suffix == ".pt2":
        if not path.is_file():
            raise UserError(f"model file {source!r} does not exist")
        try:
            program = torch.export.load(str(path))
            module = program.module()
            return module if _is_pt2e(module) else model_from_exported(program)
        except ValueError as error:
            raise UserError(str(error)) from None
        except (RuntimeError, OSError, KeyError, zipfile.BadZipFile) as error:
            raise UserError(f"cannot load {source!r} as a torch.export program: {error}") from None
    if path.suffix in (".pt", ".ts", ".jit", ".pth"):
        if not path.is_file():
            raise UserError(f"model file {source!r} does not exist")
        try:
            return load_torchscript(path)
        except ValueError as error:
            raise UserError(str(error)) from None
        except (RuntimeError, OSError) as error:
            raise UserError(f"cannot load {source!r} as TorchScript (torch.jit.save); a pickled module "
                            f"(torch.save) is not supported: {str(error).splitlines()[0]}") from None
    match = re.fullmatch(r"([A-Za-z_][\w.]*):([A-Za-z_]\w*)", source)
    if not match:
        raise UserError(f"model must be a .pt2 file, a TorchScript file (.pt, .ts, .jit) or package.module:factory, "
                        f"not {source!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(match[1])
    except ImportError as error:
        raise UserError(f"cannot import {match[1]!r}: {error}") from None
    factory = getattr(module, match[2], None)
    if not callable(factory):
        raise UserError(f"{match[1]!r} has no function {match[2]!r}")
    model = factory()
    if not isinstance(model, torch.nn.Module):
        raise UserError(f"{source} returned {type(model).__name__}, not a torch.nn.Module")
    return model.eval()


def _load_calibration(path: str) -> np.ndarray:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"calibration file {path!r} does not exist")
    try:
        if p.suffix == ".npy":
            data = np.load(p, allow_pickle=False)
        elif p.suffix == ".pt":
            import torch
            data = torch.load(p, map_location="cpu", weights_only=True)
            data = data.numpy() if isinstance(data, torch.Tensor) else data
        else:
            raise UserError(f"calibration data must be a .npy or .pt file, not {path!r}")
    except (OSError, ValueError, RuntimeError) as error:
        raise UserError(f"cannot read calibration data {path!r}: {str(error).splitlines()[0]}") from None
    if not isinstance(data, np.ndarray) or data.ndim < 2 or not np.issubdtype(data.dtype, np.floating):
        raise UserError(f"calibration data must be a float array [samples, *input_shape], not "
                        f"{getattr(data, 'dtype', type(data).__name__)} of shape {getattr(data, 'shape', '?')}")
    return data.astype(np.float32)


def _is_torch_ao_quantized(model) -> bool:
    return any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in model.modules())


def _is_pt2e(model) -> bool:
    """A graph that torchao's ``convert_pt2e`` quantized (it holds quantize/dequantize ops)."""
    from torch import fx
    return isinstance(model, fx.GraphModule) and any(
        node.op == "call_function" and "quantized_decomposed" in str(node.target) for node in model.graph.nodes)


def _quantize(model, calibration: np.ndarray, name: str, weight_bits):
    import torch
    from pytorch_ref.frontends.float_model import quantize_model
    from pytorch_ref.frontends.torch_ao import import_torch_ao
    try:
        if _is_torch_ao_quantized(model):
            if weight_bits is not None:
                raise UserError("--weight-bits applies to float models; a torch.ao model keeps its own weights")
            return import_torch_ao(model, tuple(calibration.shape[1:]), name=name)
        if _is_pt2e(model):
            from pytorch_ref.frontends.pt2e import from_pt2e
            if weight_bits is not None:
                raise UserError("--weight-bits applies to float models; a pt2e model keeps its own weights")
            return from_pt2e(model, torch.from_numpy(calibration[:1]), name=name)
        return quantize_model(model, torch.from_numpy(calibration), name=name, weight_bits=weight_bits)
    except (ValueError, TypeError) as error:
        raise UserError(str(error)) from None
    except RuntimeError as error:                      # e.g. the data's shape does not fit the model
        raise UserError(f"the model does not run on the calibration data: {str(error).splitlines()[0]}") from None


def compile_design(args) -> Path:
    from hdl.build import check_size
    from hdl.compiler.program import lower
    from hdl.config import AcceleratorConfig
    from hdl.design_report import design_report
    from hdl.gateware.axi.top import TOP_NAME as AXI_TOP, NeuralNetworkAcceleratorAxi
    from hdl.gateware.top import NeuralNetworkAccelerator
    from hdl.writers import TOP_NAME, to_verilog, to_vhdl
    from hdl.writers.fusesoc import core_file
    from hdl.writers.register_map import c_header, python_module
    from pytorch_ref.ir import integer_semantics as sem
    from pytorch_ref.ir.serialize import save_model
    from pytorch_ref.reference import run_integer_reference

    out = Path(args.output)
    if out.exists() and not args.force:
        raise UserError(f"{out} exists; choose another folder or pass --force to replace it")
    if args.vectors < 1:
        raise UserError(f"vectors must be a positive integer, not {args.vectors}")
    name = args.name or re.sub(r"\W", "_", Path(args.model.split(":")[-1]).stem) or "model"
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise UserError(f"name must be a plain identifier, not {name!r} (use --name)")
    try:
        config = AcceleratorConfig(rows=args.rows, cols=args.cols, requantizer_multipliers=args.requantizer_multipliers,
                                   runtime_weights=args.runtime_weights)
    except (TypeError, ValueError) as error:
        raise UserError(str(error)) from None
    steps = 5
    _progress(1, steps, f"loading {args.model} and {args.calibration}")
    model = _load_module(args.model)
    calibration = _load_calibration(args.calibration)
    _progress(2, steps, f"quantizing with {len(calibration)} calibration samples")
    quantized = _quantize(model, calibration, name, args.weight_bits)
    _progress(3, steps, f"compiling for a {config.rows}x{config.cols} array")
    try:
        program = lower(quantized, config)
        check_size(program, args.allow_large)
        axi = NeuralNetworkAcceleratorAxi(program, args.tdata_bits, args.output_tdata_bits or args.tdata_bits)
    except (TypeError, ValueError) as error:
        raise UserError(str(error)) from None
    codes = sem.quantize_activation(calibration[:args.vectors], quantized.input_quant.scale,
                                    quantized.input_quant.zero_point)
    codes = codes.reshape((len(codes),) + tuple(quantized.input_shape))     # a Conv1d model's (C, 1, L)
    expected = run_integer_reference(quantized, codes, device="cpu").numpy()

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        _progress(4, steps, "writing Verilog and VHDL of the accelerator and its AXI wrapper")
        files = {f"{TOP_NAME}.v": to_verilog(NeuralNetworkAccelerator(program), TOP_NAME),
                 f"{TOP_NAME}.vhd": to_vhdl(NeuralNetworkAccelerator(program), TOP_NAME),
                 f"{AXI_TOP}.v": to_verilog(axi, AXI_TOP),
                 f"{AXI_TOP}.vhd": to_vhdl(NeuralNetworkAcceleratorAxi(program, axi.input_frame.tdata_bits,
                                                                       axi.output_frame.tdata_bits), AXI_TOP),
                 "nnaccel_registers.h": c_header(), "nnaccel_registers.py": python_module(),
                 f"{name}.core": core_file(name, AXI_TOP, [f"{TOP_NAME}.v", f"{AXI_TOP}.v"],
                                           [f"{TOP_NAME}.vhd", f"{AXI_TOP}.vhd"],
                                           f"nnaccel accelerator for {name} on a {config.rows}x{config.cols} array")}
        _progress(5, steps, f"writing the report, the model and {len(codes)} test vectors")
        report = design_report(program)
        report.update(name=name, tdata_bits={"input": axi.input_frame.tdata_bits,
                                             "output": axi.output_frame.tdata_bits},
                      stream_beats={"input": axi.input_frame.tdata_beats, "output": axi.output_frame.tdata_beats})
        files[REPORT_FILE] = json.dumps(report, indent=1) + "\n"
        files[DESIGN_FILE] = json.dumps({
            "format": DESIGN_FORMAT, "version": 1, "name": name, "rows": config.rows, "cols": config.cols,
            "requantizer_multipliers": config.requantizer_multipliers, "runtime_weights": config.runtime_weights,
            "input_tdata_bits": axi.input_frame.tdata_bits, "output_tdata_bits": axi.output_frame.tdata_bits,
            "model_hash": report["model_hash"]}, indent=1) + "\n"
        for file_name, text in files.items():
            (tmp / file_name).write_text(text)
        save_model(quantized, tmp / MODEL_FILE)
        np.savez(tmp / VECTORS_FILE, inputs=np.asarray(codes, dtype=np.int8), expected=expected)
        os.chmod(tmp, 0o777 & ~_umask())
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(f"wrote {out}/: {', '.join(sorted(p.name for p in out.iterdir()))}")
    print(f"{report['macs']:,} MACs; predicted {report['ops_cycles_min']:,} to {report['ops_cycles_max']:,} "
          f"cycles for the layers (utilization up to {report['utilization_max']:.1%}); "
          f"memory {sum(report['memory_bits'].values()):,} bits")
    return out


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def load_design(folder: str):
    """The folder's design options, program and vectors; checks they belong together."""
    from hdl.compiler.program import lower
    from hdl.config import AcceleratorConfig
    from pytorch_ref.ir.serialize import load_model
    path = Path(folder)
    if not (path / DESIGN_FILE).is_file():
        raise UserError(f"{folder!r} is not a folder written by nnaccel compile (no {DESIGN_FILE})")
    try:
        design = json.loads((path / DESIGN_FILE).read_text())
        if design.get("format") != DESIGN_FORMAT:
            raise ValueError(f"format {design.get('format')!r}")
        model = load_model(path / MODEL_FILE)
        config = AcceleratorConfig(rows=design["rows"], cols=design["cols"],
                                   requantizer_multipliers=design["requantizer_multipliers"],
                                   runtime_weights=design.get("runtime_weights", False))
        with np.load(path / VECTORS_FILE, allow_pickle=False) as vectors:
            inputs, expected = vectors["inputs"], vectors["expected"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UserError(f"cannot read the design in {folder!r}: {error}") from None
    program = lower(model, config)
    if f"{program.fingerprint():08x}" != design["model_hash"]:
        raise UserError(f"{folder!r}: the model compiles to another program than the one generated "
                        f"(hash {program.fingerprint():08x}, design.json says {design['model_hash']}); "
                        f"run nnaccel compile again")
    return design, program, list(inputs), list(expected)


def simulate_design(args) -> int:
    from sim.runner import simulate
    design, program, inputs, expected = load_design(args.folder)
    build_dir = Path(args.folder) / "sim" / args.simulator
    _progress(1, 2, f"building {design['name']} for {args.simulator} in {build_dir}")
    report = simulate(program, inputs, expected, simulator=args.simulator, build_dir=build_dir, waves=args.waves)
    _progress(2, 2, f"simulated {len(report.results)} vectors")
    for r in report.results:
        print(f"vector {r['input']}: {'match' if r['match'] else 'MISMATCH'}, {r['cycles']} cycles")
    matches = sum(r["match"] for r in report.results)
    print(f"{matches}/{len(report.results)} vectors match the integer reference exactly "
          f"({report.cycles_per_second:,.0f} cycles/s on {args.simulator})")
    return 0 if report.all_match else 1


def estimate_design(args) -> int:
    from hdl.gateware.axi.top import NeuralNetworkAcceleratorAxi
    from hdl.gateware.top import NeuralNetworkAccelerator
    from hdl.tools.fpga_estimate import estimate_ecp5, format_estimate
    design, program, _, _ = load_design(args.folder)
    if args.units is not None:
        return _estimate_units(args, program)
    if args.axi:
        top, name = NeuralNetworkAcceleratorAxi(program, design["input_tdata_bits"], design["output_tdata_bits"]), \
            "neural_network_accelerator_axi"
    else:
        top, name = NeuralNetworkAccelerator(program), "neural_network_accelerator"
    # A what-if's figures describe no working design: they never replace the real estimate.
    work_dir = Path(args.folder) / ("ecp5" if args.what_if is None else f"ecp5-what-if-{args.what_if}")
    try:
        result = estimate_ecp5(top, name=name, work_dir=work_dir, device=args.device, seed=args.seed,
                               timeout_s=args.timeout, what_if=args.what_if)
    except (RuntimeError, ValueError) as error:
        raise UserError(str(error).splitlines()[0]) from None
    print(format_estimate(result))
    return 0


def _estimate_units(args, program) -> int:
    """``estimate --units``: each unit placed alone, in FOLDER/ecp5-units/."""
    from hdl.gateware.top import NeuralNetworkAccelerator
    from hdl.tools.unit_estimate import estimate_units, format_unit_table
    if args.axi or args.what_if is not None:
        raise UserError("--units places the accelerator's own units: it takes neither --axi nor --what-if")
    top = NeuralNetworkAccelerator(program)
    names = None if args.units == "all" else [name for name in args.units.split(",") if name]
    try:
        results = estimate_units(top, Path(args.folder) / "ecp5-units", names, seed=args.seed,
                                 timeout_s=args.timeout)
    except (RuntimeError, ValueError) as error:
        raise UserError(str(error).splitlines()[0]) from None
    print(format_unit_table(results))
    return 0


def weight_image_file(args) -> int:
    from hdl.compiler.program import lower
    from hdl.compiler.weight_image import check_loadable, image_beats
    from pytorch_ref.ir.atomic_file import atomic_output
    design, program, _, _ = load_design(args.folder)
    if not program.config.runtime_weights:
        raise UserError(f"{args.folder!r} was compiled with ROM weights; compile it with --runtime-weights")
    _progress(1, 3, f"loading {args.model} and {args.calibration}")
    model = _load_module(args.model)
    calibration = _load_calibration(args.calibration)
    _progress(2, 3, f"quantizing with {len(calibration)} calibration samples")
    quantized = _quantize(model, calibration, design["name"], args.weight_bits)
    try:
        new = lower(quantized, program.config)
        check_loadable(program, new)
    except (TypeError, ValueError) as error:
        raise UserError(str(error)) from None
    beats = image_beats(new)
    _progress(3, 3, f"writing {args.output}")
    try:
        with atomic_output(args.output, binary=True) as f:
            f.write(np.asarray(beats, dtype="<u4").tobytes())
    except (OSError, ValueError) as error:
        raise UserError(f"cannot write {args.output!r}: {error}") from None
    q = quantized.input_quant
    print(f"wrote {args.output}: {len(beats)} beats of 32 bits (send them on s_axis_weights, TLAST on the last); "
          f"quantize the new model's inputs with scale {q.scale!r} and zero point {q.zero_point}")
    return 0


def _parser() -> argparse.ArgumentParser:
    from hdl.config import REQUANTIZER_MULTIPLIERS
    from hdl.gateware.axi.frame_shape import TDATA_BITS
    from pytorch_ref.frontends.precision import WEIGHT_BITS_HELP
    from sim.runner import SIMULATORS
    parser = argparse.ArgumentParser(prog="nnaccel", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{compile,sim,estimate,weights}")
    c = commands.add_parser("compile", help="a model and calibration data to a folder of hardware and vectors")
    c.add_argument("model", help="a .pt2 file, a TorchScript file, or package.module:factory")
    c.add_argument("--calibration", required=True, metavar="DATA", help="float samples [N, *input_shape], .npy or .pt")
    c.add_argument("-o", "--output", required=True, metavar="FOLDER")
    c.add_argument("--name", help="the design's name (default: from the model)")
    c.add_argument("--rows", type=int, default=8)
    c.add_argument("--cols", type=int, default=8)
    c.add_argument("--weight-bits", metavar="SPEC", help=WEIGHT_BITS_HELP)
    c.add_argument("--requantizer-multipliers", choices=REQUANTIZER_MULTIPLIERS, default="dsp")
    c.add_argument("--tdata-bits", type=int, default=32, choices=TDATA_BITS, help="AXI4-Stream input width")
    c.add_argument("--output-tdata-bits", type=int, choices=TDATA_BITS, help="AXI4-Stream output width")
    c.add_argument("--vectors", type=int, default=8, help="test vectors from the calibration data (default 8)")
    c.add_argument("--runtime-weights", action="store_true",
                   help="weights loadable at run time (s_axis_weights; see nnaccel weights)")
    c.add_argument("--force", action="store_true", help="replace FOLDER if it exists")
    c.add_argument("--allow-large", action="store_true", help="generate a design over the on-chip memory limit")
    s = commands.add_parser("sim", help="simulate the folder's test vectors and check them exactly")
    s.add_argument("folder")
    s.add_argument("--simulator", choices=SIMULATORS, default="verilator")
    s.add_argument("--waves", action="store_true", help="record waveforms in FOLDER/sim/<simulator>/")
    e = commands.add_parser("estimate", help="ECP5 resources and Fmax (Yosys + nextpnr; minutes)")
    e.add_argument("folder")
    e.add_argument("--axi", action="store_true", help="the AXI wrapper instead of the bare accelerator")
    e.add_argument("--device", default="85k", help="nextpnr-ecp5 device: 25k, 45k, 85k, ... (default 85k)")
    e.add_argument("--timeout", type=float, default=None, help="seconds per tool")
    e.add_argument("--seed", type=int, default=1, help="nextpnr placer seed (default 1)")
    e.add_argument("--units", nargs="?", const="all", metavar="NAMES",
                   help="place each unit alone (all, or NAMES: comma-separated, e.g. steps,gemm.requantizer); "
                        "a table, slowest first, and results in FOLDER/ecp5-units/")
    e.add_argument("--what-if", choices=WHAT_IF, default=None,
                   help="a timing experiment on a netlist that is then not functional (bram-output-registers: "
                        "every DP16KD's output register on); results in FOLDER/ecp5-what-if-<experiment>/")
    w = commands.add_parser("weights", help="a weight image of another model for a --runtime-weights design")
    w.add_argument("folder")
    w.add_argument("model", help="a .pt2 file, a TorchScript file, or package.module:factory")
    w.add_argument("--calibration", required=True, metavar="DATA")
    w.add_argument("--weight-bits", metavar="SPEC", help=WEIGHT_BITS_HELP)
    w.add_argument("-o", "--output", required=True, metavar="IMAGE", help="the image: little-endian 32-bit words")
    return parser


def main(argv=None) -> int:
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "compile":
            compile_design(args)
            return 0
        if args.command == "sim":
            return simulate_design(args)
        if args.command == "weights":
            return weight_image_file(args)
        return estimate_design(args)
    except UserError as error:
        parser.exit(2, f"nnaccel {args.command}: error: {error}\n")
    except KeyboardInterrupt:
        parser.exit(130, "nnaccel: interrupted\n")


if __name__ == "__main__":
    sys.exit(main())
