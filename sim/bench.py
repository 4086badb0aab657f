"""``python -m sim.bench`` (``make bench``): the performance figures, all measured in one run.

1. Per layer of the LeNet-style CNN, ``Linear(800, 500)`` and ``Linear(1000, 10)``: MACs,
   cycles (hardware counters, Verilator), utilization, tiling bound and schedule
   efficiency, for several array shapes at batch 1 and batch 16.
2. FPGA estimates (Yosys + nextpnr for ECP5) of the 8x8 accelerator and of the array alone.
3. Latency per inference at that clock next to PyTorch's measured CPU latency.
4. Simulated cycles per second on Verilator, Icarus and GHDL for one design.
5. A PNG chart of per-layer utilization against the tiling bound.
6. The precision table: LeNet's accuracy and weight memory per weight-width policy
   (:mod:`sim.precision_table`).
7. Each model of the zoo (:mod:`pytorch_ref.zoo.models`) on the default array: MACs,
   cycles, utilization, tiling bound, latency at the default design's measured Fmax, and
   PyTorch's batch-1 CPU latency of the same model, float and int8, with its layers
   (depthwise ones marked). ``--models`` limits the models, ``--zoo-only`` runs this
   section alone.

Definitions (printed in the report):
utilization = useful MACs / (rows x cols x cycles); tiling bound = the cycles a layer
needs if every tile of the array is busy every cycle, padding waste included;
schedule efficiency = tiling bound / actual cycles.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from hdl.config import AcceleratorConfig
from pytorch_ref.zoo.models import BUILDERS, INPUT_SHAPES

from sim.cases import random_case, trained_case
from sim.precision_table import precision_table, print_precision_table
from sim.report import layer_table
from sim.runner import simulate

DEFINITIONS = ("utilization = useful MACs / (rows x cols x cycles); "
               "tiling bound = cycles if every tile of the array were busy every cycle, padding waste included; "
               "schedule efficiency = tiling bound / actual cycles")
MODELS = ("lenet", "linear800", "linear")
#: The design whose Fmax gives every zoo model's latency: ``make verilog``'s (LeNet on 8x8).
DEFAULT_DESIGN = "8x8 accelerator (LeNet, default widths)"


def _log(message: str):
    print(message, flush=True)


def schedule_tables(arrays, batches, build_root: Path) -> list[dict]:
    """Per-layer figures from hardware counters, one Verilator run per configuration."""
    out = []
    total = len(MODELS) * len(arrays) * len(batches)
    done = 0
    for model in MODELS:
        for rows, cols in arrays:
            for batch in batches:
                done += 1
                _log(f"[schedule {done}/{total}] {model} on {rows}x{cols}, batch {batch}")
                config = AcceleratorConfig(rows=rows, cols=cols)
                if model == "lenet":
                    case = trained_case(model, config, count=batch, batch=batch, log=lambda *a: None)
                else:
                    case = random_case(model, config, count=1, batch=batch)
                report = simulate(case.program, case.inputs, case.expected, simulator="verilator",
                                  build_dir=build_root / f"{model}_{rows}x{cols}_b{batch}",
                                  gap_probability=0.0, stall_probability=0.0)
                if not report.all_match:
                    raise RuntimeError(f"{model} on {rows}x{cols} batch {batch}: outputs differ from the reference")
                for row in layer_table(case, report):
                    out.append({"model": model, "rows": rows, "cols": cols, "batch": batch, **row})
    return out


def print_schedule(rows: list[dict]):
    """Per-layer rows; ``kind`` marks depthwise layers (see :func:`sim.report.op_kind`)."""
    header = (f"{'model':<11} {'array':>6} {'batch':>5} {'layer':<20} {'kind':<9} {'MACs':>10} {'cycles':>10} "
              f"{'util.':>7} {'bound':>10} {'eff.':>6}")
    _log(header)
    for r in rows:
        eff = f"{r['efficiency']:.3f}" if r["efficiency"] is not None else "-"
        bound = str(r["tiling_bound"]) if r["tiling_bound"] else "-"
        _log(f"{r['model']:<11} {r['rows']:>2}x{r['cols']:<3} {r['batch']:>5} {r['layer']:<20} {r['kind']:<9} "
             f"{r['macs']:>10} {r['cycles']:>10.0f} {r['utilization']:>6.1%} {bound:>10} {eff:>6}")


def whole_model(rows: list[dict]) -> list[dict]:
    """Per model/array/batch totals: utilization of the whole inference."""
    groups = {}
    for r in rows:
        key = (r["model"], r["rows"], r["cols"], r["batch"])
        g = groups.setdefault(key, {"macs": 0, "cycles": 0, "bound": 0})
        g["macs"] += r["macs"]
        g["cycles"] += r["cycles"]
        g["bound"] += r["tiling_bound"]
    return [{"model": m, "rows": ro, "cols": co, "batch": b, "macs": g["macs"], "cycles": g["cycles"],
             "utilization": g["macs"] / (ro * co * g["cycles"]), "tiling_bound": g["bound"],
             "efficiency": g["bound"] / g["cycles"]}
            for (m, ro, co, b), g in groups.items()]


def simulator_speeds(build_root: Path, inputs: int) -> list[dict]:
    """Simulated cycles per second of one design (the conv stem on 8x8, about 25,000
    cycles an inference, most of them computing) on each simulator."""
    out = []
    case = random_case("stem", AcceleratorConfig(), count=inputs)
    for sim in ("verilator", "icarus", "ghdl"):
        _log(f"[simulators] stem on 8x8, {inputs} inference(s) on {sim}")
        report = simulate(case.program, case.inputs, case.expected, simulator=sim,
                          build_dir=build_root / f"speed_{sim}")
        if sim == "ghdl":       # the runner names GHDL's back end in GHDL_BACKEND (see sim.runner)
            sim = f"ghdl ({os.environ.get('GHDL_BACKEND', 'mcode')})"
        out.append({"simulator": sim, "cycles": report.sim_cycles, "seconds": report.wall_seconds,
                    "cycles_per_second": report.cycles_per_second, "all_match": report.all_match})
    return out


def _median_seconds(model, x, repeats: int) -> float:
    times = []
    with torch.inference_mode():
        for _ in range(max(5, repeats // 10)):
            model(x)
        for _ in range(repeats):
            start = time.perf_counter()
            model(x)
            times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def _float_model(model_name: str):
    """The zoo's float model: trained, or seeded (:func:`pytorch_ref.zoo.train.trained_model`)."""
    from pytorch_ref.zoo.train import trained_model
    return trained_model(model_name, log=lambda *a: None).eval()


def _int8_model(model, model_name: str):
    """``model`` quantized by torch.ao eager mode on fbgemm, calibrated on 256 training inputs."""
    from pytorch_ref.frontends.torch_ao import torch_ao_quantize
    from pytorch_ref.zoo.data import dataset
    return torch_ao_quantize(model, dataset(model_name).x_train[:256], engine="fbgemm")


def torch_cpu_latency(model_name: str, batches=(1, 16), repeats: int = 200) -> dict:
    """Median wall time of one inference call on this machine's CPU, in seconds, for the
    trained float model and its int8 version (torch.ao eager mode on fbgemm), per batch
    size: ``{("float" | "int8", batch): seconds}``."""
    model = _float_model(model_name)
    int8 = _int8_model(model, model_name)
    out = {}
    for batch in batches:
        x = torch.randn((batch,) + INPUT_SHAPES[model_name])
        out["float", batch] = _median_seconds(model, x, repeats)
        out["int8", batch] = _median_seconds(int8, x, repeats)
    return out


def lenet_design_label(rows: int, cols: int) -> str:
    """The name of LeNet's accelerator on a ``rows`` x ``cols`` array in the FPGA figures."""
    return DEFAULT_DESIGN if (rows, cols) == (8, 8) else f"{rows}x{cols} accelerator (LeNet, default widths)"


def _array_shapes(text: str) -> list[tuple[int, ...]]:
    """``"8x8,12x12"`` as ``[(8, 8), (12, 12)]`` (ValueError where a number is not one)."""
    return [tuple(int(v) for v in shape.split("x")) for shape in text.split(",")]


def fpga_estimates(build_root: Path, default_only: bool = False,
                   lenet_arrays: tuple[tuple[int, int], ...] = ((8, 8),)) -> list[dict]:
    """Yosys + nextpnr figures of the 8x8 accelerator for ``Linear(1000, 10)``, of LeNet's
    accelerator on each of ``lenet_arrays`` (:data:`DEFAULT_DESIGN` on 8x8) and of the array
    alone; only of :data:`DEFAULT_DESIGN` with ``default_only``. A LeNet design's figures
    carry its array as ``lenet_array``."""
    from hdl.tools.fpga_estimate import estimate_ecp5
    from hdl.gateware.systolic_array import SystolicArray
    from hdl.gateware.top import NeuralNetworkAccelerator

    def accelerator(case):
        return lambda: NeuralNetworkAccelerator(case().program)

    def lenet(rows, cols):
        return accelerator(lambda: trained_case("lenet", AcceleratorConfig(rows=rows, cols=cols), count=1,
                                                log=lambda *a: None))

    arrays = [(8, 8)] if default_only else list(dict.fromkeys(lenet_arrays))
    designs = [("8x8 accelerator (Linear(1000,10))",
                accelerator(lambda: random_case("linear", AcceleratorConfig(), count=1)),
                "neural_network_accelerator", None)]
    designs += [(lenet_design_label(r, c), lenet(r, c),
                 "neural_network_accelerator_lenet" + ("" if (r, c) == (8, 8) else f"_{r}x{c}"), [r, c])
                for r, c in arrays]
    designs += [("8x8 systolic array alone", lambda: SystolicArray(8, 8), "systolic_array", None)]
    out = []
    for label, design, name, lenet_array in designs:
        if default_only and label != DEFAULT_DESIGN:
            continue
        _log(f"[fpga] {label}: Yosys synth_ecp5 + nextpnr-ecp5 (minutes)")
        result = estimate_ecp5(design(), name=name, work_dir=build_root / f"fpga_{name}")
        out.append({"design": label, "lenet_array": lenet_array, **result})
    return out


def torch_cpu_batch1(model_name: str, repeats: int = 200) -> dict:
    """PyTorch's batch-1 latency of a zoo model on this CPU (median seconds): ``float`` and
    ``int8`` (torch.ao eager mode on fbgemm), or ``int8`` None and ``int8_error`` the
    reason where PyTorch cannot quantize or run the model."""
    x = torch.randn((1,) + INPUT_SHAPES[model_name])
    model = _float_model(model_name)
    out = {"float": _median_seconds(model, x, repeats), "int8": None, "int8_error": None}
    try:
        out["int8"] = _median_seconds(_int8_model(model, model_name), x, repeats)
    except (RuntimeError, AssertionError, TypeError, ValueError) as failure:   # NotImplementedError too
        first_sentence = str(failure).splitlines()[0].split(". ")[0] if str(failure) else ""
        out["int8_error"] = f"{type(failure).__name__}: {first_sentence}"
    return out


def zoo_model_run(name: str, build_root: Path) -> tuple[dict, list[dict]]:
    """One inference of the zoo model ``name`` (the weights ``make sim`` uses) on the default
    array, on Verilator without stalls: the totals from the hardware counters, and the
    per-layer rows (:func:`sim.report.layer_table`)."""
    config = AcceleratorConfig()
    case = trained_case(name, config, count=1, log=lambda *a: None)
    report = simulate(case.program, case.inputs, case.expected, simulator="verilator",
                      build_dir=build_root / f"zoo_{name}", gap_probability=0.0, stall_probability=0.0)
    if not report.all_match:
        raise RuntimeError(f"{name} on {config.rows}x{config.cols}: outputs differ from the reference")
    layers = [{"model": name, "rows": config.rows, "cols": config.cols, "batch": 1, **row}
              for row in layer_table(case, report)]
    cycles = report.results[0]["cycles"]
    macs = sum(r["macs"] for r in layers)
    bound = sum(r["tiling_bound"] for r in layers)
    total = {"model": name, "rows": config.rows, "cols": config.cols, "macs": macs, "cycles": cycles,
             "utilization": macs / (config.pes * cycles), "tiling_bound": bound, "efficiency": bound / cycles,
             "depthwise_cycles": sum(r["cycles"] for r in layers if r["kind"] == "depthwise"),
             "depthwise_macs": sum(r["macs"] for r in layers if r["kind"] == "depthwise"),
             "build_seconds": report.build_seconds, "sim_seconds": report.wall_seconds}
    return total, layers


def zoo_models(names, build_root: Path, fmax_mhz: float | None, repeats: int = 200) -> tuple[list[dict], list[dict]]:
    """:func:`zoo_model_run` and :func:`torch_cpu_batch1` of each model of ``names``, with
    the latency at ``fmax_mhz`` (None: no latency)."""
    totals, layers = [], []
    for index, name in enumerate(names, 1):
        _log(f"[zoo {index}/{len(names)}] {name} on the default array, Verilator; PyTorch CPU latency")
        total, rows = zoo_model_run(name, build_root)
        cpu = torch_cpu_batch1(name, repeats)
        total.update(latency_seconds=total["cycles"] / (fmax_mhz * 1e6) if fmax_mhz else None,
                     torch_float_seconds=cpu["float"], torch_int8_seconds=cpu["int8"], torch_int8_error=cpu["int8_error"])
        totals.append(total)
        layers += rows
    return totals, layers


def _microseconds(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.1f}"


def print_zoo(totals: list[dict], layers: list[dict], fmax_mhz: float | None, fmax_source: str):
    """The per-model table, the reasons for any missing int8 figure, and the layers."""
    _log(f"latency = cycles / Fmax, at {fmax_source}" if fmax_mhz else f"latency: - ({fmax_source})")
    _log(f"PyTorch on this CPU ({torch.get_num_threads()} threads), batch 1, median: float, and int8 by torch.ao "
         f"eager mode (fbgemm); simulation: Verilator, no stalls, hardware counters")
    _log(f"{'model':<11} {'array':>6} {'MACs':>10} {'cycles':>10} {'util.':>7} {'bound':>10} {'eff.':>6} "
         f"{'dw cycles':>9} {'dw util.':>8} {'latency us':>11} {'CPU float us':>13} {'CPU int8 us':>12} "
         f"{'sim s':>6}")
    for t in totals:
        dw_util = (f"{t['depthwise_macs'] / (t['rows'] * t['cols'] * t['depthwise_cycles']):.1%}"
                   if t["depthwise_cycles"] else "-")
        _log(f"{t['model']:<11} {t['rows']:>2}x{t['cols']:<3} {t['macs']:>10} {t['cycles']:>10} "
             f"{t['utilization']:>6.1%} {t['tiling_bound']:>10} {t['efficiency']:>6.3f} "
             f"{t['depthwise_cycles'] / t['cycles']:>8.1%} {dw_util:>8} {_microseconds(t['latency_seconds']):>11} "
             f"{_microseconds(t['torch_float_seconds']):>13} {_microseconds(t['torch_int8_seconds']):>12} "
             f"{t['build_seconds'] + t['sim_seconds']:>6.1f}")
    for t in totals:
        if t["torch_int8_error"]:
            _log(f"{t['model']}: no int8 CPU figure, torch.ao: {t['torch_int8_error']}")
    _log("dw cycles: share of the cycles in depthwise layers; dw util.: their utilization (taps-on-rows: "
         "ceil(kh * kw / rows) tiles of kh * kw taps); sim s: HDL generation, build and simulation")
    _log("\nper layer (kind: conv, depthwise, grouped, dense, maxpool, io; average pooling runs as a depthwise "
         "convolution under its own name)")
    print_schedule(layers)


def summary_rows(totals: list[dict], fpga: list[dict], cpu: dict) -> list[tuple[str, str]]:
    """The headline figures in one table: utilization per array, the FPGA figures, and
    latency and throughput beside PyTorch's on this CPU."""
    rows = []

    def total(model, rows_cols, batch):
        return next((t for t in totals if t["model"] == model and (t["rows"], t["cols"]) == rows_cols
                     and t["batch"] == batch), None)

    for model in ("lenet", "linear"):
        for t in totals:
            if t["model"] == model and t["batch"] == 1:
                rows.append((f"{model} utilization, {t['rows']}x{t['cols']}, batch 1 (load and output included)",
                             f"{t['utilization']:.1%} ({t['cycles']:.0f} cycles)"))
    for f in fpga:
        rows.append((f"ECP5-85F: {f['design']}",
                     f"Fmax {f['fmax_mhz']:.1f} MHz, DSP {f['dsp']}, DP16KD {f['bram']}, LUT4 {f['lut4']}"))
    for batch in sorted({b for _, b in cpu}):
        per_image = f" per image" if batch > 1 else ""
        rows.append((f"PyTorch CPU, batch {batch}{per_image}: float / int8 (fbgemm)",
                     f"{cpu['float', batch] / batch * 1e6:.0f} us / {cpu['int8', batch] / batch * 1e6:.0f} us"))
        for f in fpga:                          # each placed LeNet design at its own Fmax
            lenet = f.get("lenet_array") and total("lenet", tuple(f["lenet_array"]), batch)
            if lenet:
                seconds = lenet["cycles"] / batch / (f["fmax_mhz"] * 1e6)
                rows.append((f"accelerator {lenet['rows']}x{lenet['cols']}, batch {batch}{per_image}, "
                             f"at its {f['fmax_mhz']:.1f} MHz",
                             f"{seconds * 1e6:.0f} us ({lenet['cycles'] / batch:.0f} cycles); "
                             f"int8 CPU / accelerator = {cpu['int8', batch] / batch / seconds:.2f}"))
    return rows


def chart(rows: list[dict], path: Path, rows_cols=(8, 8), batch=1):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    selected = [r for r in rows if (r["rows"], r["cols"]) == rows_cols and r["batch"] == batch and r["macs"]]
    labels = [f"{r['model']}\n{r['layer']}" for r in selected]
    pes = rows_cols[0] * rows_cols[1]
    measured = [r["utilization"] for r in selected]
    bound = [r["macs"] / (pes * r["tiling_bound"]) for r in selected]
    fig, ax = plt.subplots(figsize=(max(6, len(selected) * 0.9), 4.5))
    xs = range(len(selected))
    ax.bar([x - 0.2 for x in xs], bound, width=0.4, label="utilization at the tiling bound")
    ax.bar([x + 0.2 for x in xs], measured, width=0.4, label="measured utilization")
    ax.set_xticks(list(xs), labels, fontsize=7)
    ax.set_ylim(0, 1)
    ax.set_ylabel("useful MACs / (rows x cols x cycles)")
    ax.set_title(f"Per-layer utilization, {rows_cols[0]}x{rows_cols[1]} array, batch {batch}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def zoo_fmax(fpga: list[dict], given: float | None) -> tuple[float | None, str]:
    """The clock of the zoo's latencies, and where it comes from: ``given`` (``--fmax-mhz``),
    else the Fmax measured in this run on :data:`DEFAULT_DESIGN`, else none."""
    if given:
        return given, f"{given:.1f} MHz, given with --fmax-mhz"
    measured = next((f for f in fpga if f["design"] == DEFAULT_DESIGN), None)
    if measured:
        return measured["fmax_mhz"], (f"{measured['fmax_mhz']:.1f} MHz, the Fmax measured in this run on "
                                      f"{DEFAULT_DESIGN} (ECP5-85F, Yosys + nextpnr); the other models' "
                                      f"designs were not placed")
    return None, "no Fmax: --skip-fpga without --fmax-mhz"


def zoo_section(names, fpga: list[dict], args, build_root: Path) -> dict:
    """Section 7's figures (:func:`print_zoo_section` prints them)."""
    fmax, source = zoo_fmax(fpga, args.fmax_mhz)
    totals, layers = zoo_models(names, build_root, fmax, args.cpu_repeats)
    return {"fmax_mhz": fmax, "fmax_source": source, "models": totals, "layers": layers}


def print_zoo_section(zoo: dict):
    _log("\n== each zoo model on the default array, batch 1 ==")
    print_zoo(zoo["models"], zoo["layers"], zoo["fmax_mhz"], zoo["fmax_source"])


def _zoo_names(parser, text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in BUILDERS]
    if unknown or not names:
        parser.error(f"models must be names of the zoo ({', '.join(BUILDERS)}) separated by commas, not {text!r}")
    return names


def _write_results(out_dir: Path, results: dict):
    tmp = out_dir / "results.json.tmp"
    tmp.write_text(json.dumps(results, indent=1, default=float))
    tmp.replace(out_dir / "results.json")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--arrays", default="8x8,12x12,16x16")
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--out", default="build/bench")
    parser.add_argument("--skip-fpga", action="store_true")
    parser.add_argument("--place-lenet", default="8x8,12x12",
                        help="arrays whose LeNet accelerator is placed and routed (12x12: about 25 minutes more)")
    parser.add_argument("--speed-inputs", type=int, default=1)
    parser.add_argument("--skip-precision", action="store_true", help="leave out the precision table")
    parser.add_argument("--models", default=",".join(BUILDERS),
                        help="zoo models of the per-model section, e.g. lenet,dscnn (default: all)")
    parser.add_argument("--zoo-only", action="store_true",
                        help="only the per-model section (and the default design's Fmax unless --skip-fpga)")
    parser.add_argument("--fmax-mhz", type=float, default=None,
                        help="clock of the per-model latencies instead of the default design's measured Fmax")
    parser.add_argument("--cpu-repeats", type=int, default=200, help="PyTorch calls timed per model")
    args = parser.parse_args(argv)
    names = _zoo_names(parser, args.models)
    if args.fmax_mhz is not None and not args.fmax_mhz > 0:
        parser.error(f"fmax-mhz must be positive, not {args.fmax_mhz!r}")
    if args.cpu_repeats < 1:
        parser.error(f"cpu-repeats must be a positive integer, not {args.cpu_repeats!r}")
    try:
        arrays, placed = _array_shapes(args.arrays), _array_shapes(args.place_lenet)
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        parser.error(f"arrays and place-lenet must look like 4x4,8x8 and batches like 1,16, not "
                     f"{args.arrays!r} / {args.place_lenet!r} / {args.batches!r}")
    if not set(placed) <= set(arrays):
        parser.error(f"place-lenet arrays must be among the arrays ({args.arrays}), not {args.place_lenet!r}")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    build_root = out_dir / "runs"
    started = datetime.datetime.now(datetime.timezone.utc)
    command = "python -m sim.bench " + " ".join(argv if argv is not None else sys.argv[1:])
    _log(f"make bench: {command.strip()}\ndate {started:%Y-%m-%d %H:%M UTC}, host {platform.node()}, "
         f"{platform.processor() or platform.machine()}\n{DEFINITIONS}\n")
    results = {"command": command, "date": started.isoformat(), "definitions": DEFINITIONS}
    if args.zoo_only:
        fpga = [] if args.skip_fpga or args.fmax_mhz else fpga_estimates(build_root, default_only=True)
        zoo = zoo_section(names, fpga, args, build_root)
        print_zoo_section(zoo)
        _write_results(out_dir, {**results, "fpga": fpga, "zoo": zoo})
        _log(f"\nwrote {out_dir / 'results.json'}")
        return 0

    schedule = schedule_tables(arrays, batches, build_root)
    totals = whole_model(schedule)
    speeds = simulator_speeds(build_root, args.speed_inputs)
    fpga = [] if args.skip_fpga else fpga_estimates(build_root, lenet_arrays=tuple(placed))
    cpu = torch_cpu_latency("lenet")
    cpu_latency = cpu["float", 1]
    precision = [] if args.skip_precision else precision_table(log=_log)
    zoo = zoo_section(names, fpga, args, build_root)

    _log("\n== per layer ==")
    print_schedule(schedule)
    _log("\n== whole inference ==")
    for t in totals:
        _log(f"{t['model']:<10} {t['rows']:>2}x{t['cols']:<3} batch {t['batch']:>3}: {t['macs']} MACs, "
             f"{t['cycles']:.0f} cycles, utilization {t['utilization']:.1%}, efficiency {t['efficiency']:.3f}")
    _log("\n== simulators (conv stem, 8x8; testbench included) ==")
    for s in speeds:
        _log(f"{s['simulator']:<12} {s['cycles_per_second']:>12,.0f} simulated cycles/s "
             f"({s['cycles']:.0f} cycles in {s['seconds']:.2f} s)")
    latency = {}
    lenet_8x8 = next((t for t in totals if t["model"] == "lenet" and (t["rows"], t["cols"]) == (8, 8)
                      and t["batch"] == 1), None)
    if fpga:
        _log("\n== FPGA estimates (ECP5 LFE5U-85F, Yosys + nextpnr) ==")
        for f in fpga:
            _log(f"{f['design']:<42} LUT4 {f['lut4']:>6}  FF {f['ff']:>6}  DSP {f['dsp']:>3}  "
                 f"BRAM {f['bram']:>3}  Fmax {f['fmax_mhz']:.1f} MHz")
        default_design = next((f for f in fpga if f["design"] == DEFAULT_DESIGN), None)
        if lenet_8x8 and default_design:
            fmax = default_design["fmax_mhz"]
            latency = {"fmax_mhz": fmax, "cycles": lenet_8x8["cycles"],
                       "accelerator_seconds": lenet_8x8["cycles"] / (fmax * 1e6),
                       "torch_cpu_seconds": cpu_latency}
    if lenet_8x8 and not latency:
        latency = {"torch_cpu_seconds": cpu_latency, "cycles": lenet_8x8["cycles"]}
    _log("\n== latency, LeNet-style CNN, batch 1 ==")
    _log(f"PyTorch float on this CPU ({torch.get_num_threads()} threads): {cpu_latency * 1e6:.0f} us per inference")
    if "accelerator_seconds" in latency:
        ratio = latency["torch_cpu_seconds"] / latency["accelerator_seconds"]
        _log(f"accelerator 8x8 at {latency['fmax_mhz']:.1f} MHz: {latency['cycles']:.0f} cycles = "
             f"{latency['accelerator_seconds'] * 1e6:.0f} us; CPU / accelerator = {ratio:.2f}")
    latency["torch_cpu"] = {f"{kind}_b{batch}": seconds for (kind, batch), seconds in cpu.items()}
    if precision:
        _log("\n== precision: LeNet held-out accuracy (integer reference) and 8x8 weight memory ==")
        print_precision_table(precision, log=_log)
    print_zoo_section(zoo)
    _log("\n== summary (this run) ==")
    for label, value in summary_rows(totals, fpga, cpu):
        _log(f"{label:<62} {value}")
    chart_path = out_dir / "utilization.png"
    chart(schedule, chart_path)
    _write_results(out_dir, {**results, "schedule": schedule, "totals": totals, "simulators": speeds, "fpga": fpga,
                             "latency": latency, "precision": precision, "zoo": zoo})
    _log(f"\nwrote {out_dir / 'results.json'} and {chart_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
