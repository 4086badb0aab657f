"""``make bench``'s per-model section (sim/bench.py), run on one small model: the printed
figures agree with one another and with the hardware's pinned cycles."""
import json
import re

import pytest

from sim import bench

SUMMARY = re.compile(r"^(?P<model>\S+)\s+(?P<array>\d+x\d+)\s+(?P<macs>\d+)\s+(?P<cycles>\d+)\s+(?P<util>\S+%)\s+"
                     r"(?P<bound>\d+)\s+(?P<eff>\S+)\s+(?P<dw>\S+%)\s+(?P<dw_util>\S+%)\s+(?P<latency>\S+)\s+(?P<cpu_float>\S+)\s+"
                     r"(?P<cpu_int8>\S+)\s+(?P<sim_s>\S+)$")
LAYER = re.compile(r"^(?P<model>\S+)\s+(?P<array>\d+x\d+)\s+(?P<batch>\d+)\s+(?P<layer>.+?)\s+"
                   r"(?P<kind>conv|depthwise|grouped|dense|add|concat|maxpool|io)\s+(?P<macs>\d+)\s+(?P<cycles>\d+)\s+"
                   r"(?P<util>\S+%)\s+(?P<bound>\S+)\s+(?P<eff>\S+)$")
PES = 8 * 8
FMAX_MHZ = 50.0


def zoo_lines(text: str) -> tuple[list[dict], list[dict]]:
    """The summary rows and the per-layer rows printed under the per-model section."""
    section = text.split("== each zoo model on the default array, batch 1 ==")[1]
    summary, layers = section.split("\nper layer")
    return ([m.groupdict() for m in map(SUMMARY.match, summary.splitlines()) if m],
            [m.groupdict() for m in map(LAYER.match, layers.splitlines()) if m])


def test_zoo_section_figures_are_consistent(tmp_path, capsys):
    """dwsep (a depthwise and a pointwise convolution) on 8x8: MACs, cycles and tiling
    bound are the sums of its layers', utilization MACs / (64 x cycles), latency cycles /
    Fmax, and the cycles those of the pinned schedule (no stalls: exact)."""
    assert bench.main(["--zoo-only", "--models", "dwsep", "--fmax-mhz", str(FMAX_MHZ), "--cpu-repeats", "5",
                       "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"latency = cycles / Fmax, at {FMAX_MHZ:.1f} MHz, given with --fmax-mhz" in out
    (summary,), layers = zoo_lines(out)
    assert [(r["layer"], r["kind"]) for r in layers] == [("0.Conv2d", "depthwise"), ("3.Conv2d", "conv"),
                                                         ("(input load)", "io"), ("(output)", "io")]
    assert [int(r["cycles"]) for r in layers] == [585, 566, 65, 519]
    macs, cycles, bound = int(summary["macs"]), int(summary["cycles"]), int(summary["bound"])
    assert (summary["model"], summary["array"], macs, cycles) == ("dwsep", "8x8", 51200, 1735)
    assert macs == sum(int(r["macs"]) for r in layers)
    assert cycles == sum(int(r["cycles"]) for r in layers)
    assert bound == sum(int(r["bound"]) for r in layers if r["bound"] != "-") == 512 + 512
    assert summary["util"] == f"{macs / (PES * cycles):.1%}"
    assert summary["eff"] == f"{bound / cycles:.3f}"
    assert summary["dw"] == f"{int(layers[0]['cycles']) / cycles:.1%}"
    assert summary["dw_util"] == layers[0]["util"] == f"{int(layers[0]['macs']) / (PES * int(layers[0]['cycles'])):.1%}"
    assert summary["latency"] == f"{cycles / FMAX_MHZ:.1f}"          # cycles / MHz = microseconds
    for r in layers:
        assert r["util"] == f"{int(r['macs']) / (PES * int(r['cycles'])):.1%}", r
    assert float(summary["cpu_float"]) > 0 and float(summary["cpu_int8"]) > 0
    saved = json.loads((tmp_path / "results.json").read_text())["zoo"]
    assert saved["fmax_mhz"] == FMAX_MHZ
    assert [(m["model"], m["macs"], m["cycles"]) for m in saved["models"]] == [("dwsep", macs, cycles)]


def test_int8_cpu_latency_names_why_torch_ao_cannot_run_the_model():
    """The autoencoder's BatchNorm1d after a Linear is not fused by the torch.ao eager-mode
    flow, and PyTorch has no quantized BatchNorm1d: no int8 figure, with the reason."""
    cpu = bench.torch_cpu_batch1("autoencoder", repeats=3)
    assert cpu["float"] > 0 and cpu["int8"] is None
    assert re.match(r"^NotImplementedError: Could not run 'aten::native_batch_norm' .*'QuantizedCPU' backend$",
                    cpu["int8_error"]), cpu["int8_error"]


def test_op_kind_names_each_kind_of_layer():
    """The kinds the per-layer rows print, from the lowered program and its model alone."""
    import torch
    from torch import nn

    from hdl.compiler.program import lower
    from hdl.config import AcceleratorConfig
    from pytorch_ref.frontends.float_model import quantize_model
    from sim.report import op_kind
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.ReLU(), nn.Conv2d(8, 8, 1, groups=2),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2)).eval()
    quantized = quantize_model(model, torch.randn(16, 3, 8, 8), name="kinds")
    program = lower(quantized, AcceleratorConfig(rows=4, cols=4))
    layers = {layer.name: layer for layer in quantized.layers}
    assert [(op.name, op_kind(op, layers)) for op in program.ops] == [
        ("0.Conv2d", "conv"), ("2.MaxPool2d", "maxpool"), ("3.Conv2d", "depthwise"), ("5.Conv2d", "grouped"),
        ("6.AdaptiveAvgPool2d", "depthwise"), ("8.Linear", "dense")]
    assert op_kind(None, layers) == "io"


def test_zoo_fmax_names_its_source():
    measured = [{"design": "8x8 systolic array alone", "fmax_mhz": 200.0},
                {"design": bench.DEFAULT_DESIGN, "fmax_mhz": 55.9}]
    assert bench.zoo_fmax(measured, None) == (55.9, f"55.9 MHz, the Fmax measured in this run on "
                                                    f"{bench.DEFAULT_DESIGN} (ECP5-85F, Yosys + nextpnr); the "
                                                    f"other models' designs were not placed")
    assert bench.zoo_fmax(measured, 100.0) == (100.0, "100.0 MHz, given with --fmax-mhz")
    assert bench.zoo_fmax([], None) == (None, "no Fmax: --skip-fpga without --fmax-mhz")


def test_summary_gives_each_placed_lenet_design_its_own_fmax():
    """Each LeNet design's latency uses the Fmax measured on that design (not the first
    design's), per image at each batch, beside PyTorch's int8 figure of that batch."""
    totals = [{"model": "lenet", "rows": r, "cols": r, "batch": b, "cycles": cycles, "utilization": 0.5}
              for r, b, cycles in [(8, 1, 50_000), (12, 1, 25_000), (8, 16, 640_000), (12, 16, 320_000)]]
    fpga = [{"design": "8x8 accelerator (Linear(1000,10))", "lenet_array": None, "fmax_mhz": 120.0, "dsp": 72,
             "bram": 10, "lut4": 1},
            {"design": bench.DEFAULT_DESIGN, "lenet_array": [8, 8], "fmax_mhz": 100.0, "dsp": 72, "bram": 170,
             "lut4": 2},
            {"design": bench.lenet_design_label(12, 12), "lenet_array": [12, 12], "fmax_mhz": 50.0, "dsp": 156,
             "bram": 172, "lut4": 3}]
    cpu = {("float", 1): 400e-6, ("int8", 1): 250e-6, ("float", 16): 1600e-6, ("int8", 16): 1600e-6}
    rows = dict(bench.summary_rows(totals, fpga, cpu))
    assert rows["accelerator 8x8, batch 1, at its 100.0 MHz"] == "500 us (50000 cycles); int8 CPU / accelerator = 0.50"
    assert rows["accelerator 12x12, batch 1, at its 50.0 MHz"] == "500 us (25000 cycles); int8 CPU / accelerator = 0.50"
    assert rows["accelerator 12x12, batch 16 per image, at its 50.0 MHz"] == \
        "400 us (20000 cycles); int8 CPU / accelerator = 0.25"
    assert rows["PyTorch CPU, batch 16 per image: float / int8 (fbgemm)"] == "100 us / 100 us"
    assert not any("120.0 MHz" in label for label in rows)


@pytest.mark.parametrize("argv, message", [
    (["--models", "dwsep,resnet"], r"models must be names of the zoo \(linear, .*, mobilenet\) separated by "
                                   r"commas, not 'dwsep,resnet'"),
    (["--models", ","], r"models must be names of the zoo .* not ','"),
    (["--fmax-mhz", "0"], r"fmax-mhz must be positive, not 0.0"),
    (["--cpu-repeats", "0"], r"cpu-repeats must be a positive integer, not 0"),
    (["--place-lenet", "12by12"], r"arrays and place-lenet must look like 4x4,8x8 .* not '8x8,12x12,16x16' / "
                                  r"'12by12' / '1,16'"),
    (["--arrays", "8x8", "--place-lenet", "8x8,12x12"],
     r"place-lenet arrays must be among the arrays \(8x8\), not '8x8,12x12'"),
])
def test_bench_rejects_bad_options(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(argv)
    assert exit_info.value.code == 2
    assert re.search(f"error: {message}$", capsys.readouterr().err.strip())
