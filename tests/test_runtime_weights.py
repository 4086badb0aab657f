"""Run-time weights: a design generated for one model runs another of the same shapes once
its weight image is loaded; the loader against a model of the image, its framing errors;
which models may be loaded."""
import dataclasses

import pytest

from hdl.compiler.weight_image import (SECTIONS, ImageLayout, bias_word_values, check_loadable, image_beats,
                                       requant_word_values, weight_word_values, zero_point_values)
from hdl.config import AcceleratorConfig
from hdl.gateware.weight_loader import WeightLoader
from sim.cases import random_case
from sim.runner import simulate
from tests.component_sim import run_bench

RUNTIME = AcceleratorConfig(rows=4, cols=4, runtime_weights=True)


def two_models(name="mlp", config=RUNTIME, count=2):
    return random_case(name, config, count=count, seed=0), random_case(name, config, count=count, seed=1)


@pytest.mark.parametrize("simulator", ["verilator", "ghdl"])
def test_reloaded_model_runs_exactly(simulator, tmp_path):
    """Model A's hardware: A's input, then B's image and two of B's inputs, then A's image
    again and A's input; every output equals its own model's reference."""
    a, b = two_models()
    assert (b.expected[0] != a.expected[0]).any()          # the models differ where it shows
    report = simulate(a.program, [a.inputs[0], b.inputs[0], b.inputs[1], a.inputs[1]],
                      [a.expected[0], b.expected[0], b.expected[1], a.expected[1]],
                      simulator=simulator, build_dir=tmp_path,
                      weights_before={1: image_beats(b.program), 3: image_beats(a.program)})
    assert [r["match"] for r in report.results] == [True] * 4


def test_without_a_reload_the_old_model_would_be_wrong(tmp_path):
    """The checker's view of the test above: B's inputs on A's weights do not give B's outputs."""
    a, b = two_models()
    report = simulate(a.program, [b.inputs[0]], [b.expected[0]], simulator="verilator", build_dir=tmp_path)
    assert not report.results[0]["match"]


def test_image_layout_and_beats():
    a, _ = two_models()
    layout = ImageLayout.of(a.program)
    assert layout.words == (len(a.program.weight_words), len(a.program.bias), len(a.program.bias),
                            len(a.program.gemm_ops))
    assert layout.bits[0] == 4 * 4 * 8 and layout.bits[1] == 4 * 32
    beats = image_beats(a.program)
    assert len(beats) == layout.beats and all(0 <= b < 2 ** 32 for b in beats)
    first = weight_word_values(a.program)[0]
    assert beats[:4] == [(first >> (32 * i)) & 0xFFFFFFFF for i in range(4)]


def _loader_bench(layout, sends):
    """Runs ``WeightLoader`` over ``sends``: a list of ``(beats, last_at)`` images; returns
    the writes (section, addr, data), and the done and error pulses."""
    dut = WeightLoader(layout)
    writes, events = [], []

    async def bench(ctx):
        ctx.set(dut.enable, 1)
        for beats, last_at in sends:
            for index, value in enumerate(beats):
                ctx.set(dut.beats.payload.data, value)
                ctx.set(dut.beats.payload.last, index == last_at)
                ctx.set(dut.beats.valid, 1)
                assert ctx.get(dut.beats.ready)
                if ctx.get(dut.done):
                    events.append("done")
                if ctx.get(dut.error):
                    events.append("error")
                await ctx.tick()
                for s, name in enumerate(SECTIONS):
                    port = getattr(dut, f"load_{name}")
                    if ctx.get(port.en):
                        writes.append((s, ctx.get(port.addr), ctx.get(port.data)))
            ctx.set(dut.beats.valid, 0)
        for _ in range(2):
            await ctx.tick()
            for s, name in enumerate(SECTIONS):
                port = getattr(dut, f"load_{name}")
                if ctx.get(port.en):
                    writes.append((s, ctx.get(port.addr), ctx.get(port.data)))

    run_bench(dut, bench)
    return writes, events


def _expected_writes(program):
    sections = (weight_word_values(program), bias_word_values(program), requant_word_values(program),
                zero_point_values(program))
    layout = ImageLayout.of(program)
    return [(s, addr, value & ((1 << layout.bits[s]) - 1))
            for s, values in enumerate(sections) for addr, value in enumerate(values)]


def test_loader_writes_every_word_of_the_image():
    a, _ = two_models()
    beats = image_beats(a.program)
    writes, events = _loader_bench(ImageLayout.of(a.program), [(beats, len(beats) - 1)])
    assert events == ["done"]
    assert [(s, addr, data & ((1 << ImageLayout.of(a.program).bits[s]) - 1)) for s, addr, data in writes] \
        == _expected_writes(a.program)


def test_loader_framing_errors_then_a_good_image():
    """An image cut short (TLAST early), one with no TLAST on its last beat (and three extra
    beats, dropped), then a whole one: error, error, done, and the last image's writes."""
    a, b = two_models()
    good, other = image_beats(a.program), image_beats(b.program)
    sends = [(other[:10], 9), (other + [1, 2, 3], len(other) + 2), (good, len(good) - 1)]
    writes, events = _loader_bench(ImageLayout.of(a.program), sends)
    assert events == ["error", "error", "done"]
    bits = ImageLayout.of(a.program).bits
    tail = [(s, addr, data & ((1 << bits[s]) - 1)) for s, addr, data in writes[-len(_expected_writes(a.program)):]]
    assert tail == _expected_writes(a.program)


def test_check_loadable_messages():
    a, b = two_models()
    check_loadable(a.program, b.program)
    rom = random_case("mlp", dataclasses.replace(RUNTIME, runtime_weights=False), count=1).program
    with pytest.raises(ValueError, match=r"^the design was generated with ROM weights"):
        check_loadable(rom, b.program)
    other = random_case("linear", RUNTIME, count=1).program
    with pytest.raises(ValueError, match=r"^the new model has 1 ops, the design 2$"):
        check_loadable(a.program, other)
    ops = list(b.program.ops)
    ops[1] = dataclasses.replace(ops[1], stride=(2, 2))
    with pytest.raises(ValueError, match=r"^op 1 \(.*\) differs in shape from the design's"):
        check_loadable(a.program, dataclasses.replace(b.program, ops=ops))
    wider = random_case("mlp", dataclasses.replace(RUNTIME, cols=8), count=1).program
    with pytest.raises(ValueError, match=r"^the new model is compiled for another configuration"):
        check_loadable(a.program, wider)


def test_runtime_weights_must_be_a_bool():
    with pytest.raises(TypeError, match=r"^runtime weights must be True or False, not 1$"):
        AcceleratorConfig(runtime_weights=1)
