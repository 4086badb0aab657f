"""The accelerator's input and output side on Amaranth's simulator, against Python models:
``InputLoader`` (input beats to activation words), ``OutputUnit`` (output tensor to beats and
the predicted class) and the host-side packing of :mod:`hdl.host`.

Beats are packed here from the documented layout (word ``w`` of a beat in bits
``[w*B*8, (w+1)*B*8)``, lane ``l`` in bits ``[l*8, l*8+8)``, two's complement), not with
:mod:`hdl.host`, so that the host functions are checked against it too.
"""
import math

import numpy as np
import pytest

from hdl.compiler.program import TensorPlacement, lower
from hdl.compiler.widths import Widths
from hdl.config import AcceleratorConfig
from hdl.gateware.input_loader import InputLoader
from hdl.gateware.activation_memory import ActivationMemory
from hdl.gateware.output_unit import OutputUnit
from hdl.host import int_to_words, pack_input, tensor_to_words, unpack_output, words_to_int, words_to_tensor
from pytorch_ref.ir.quantized_model import (Conv2dLayer, DenseLayer, QuantizedModel, QuantParams,
                                            Requantization)
from tests.component_sim import ReadLatency, run_bench

BITS = 8


def word_value(lanes) -> int:
    """One activation word as an unsigned integer, lane 0 in the low bits."""
    return sum((int(v) & 0xFF) << (BITS * lane) for lane, v in enumerate(lanes))


def lanes_of(value: int, bank: int) -> list:
    out = []
    for lane in range(bank):
        byte = (value >> (BITS * lane)) & 0xFF
        out.append(byte - 256 if byte >= 128 else byte)
    return out


def beats_of(words, words_per_beat: int, bank: int) -> list:
    """Beat values from words (the last beat's unused slots zero)."""
    beats = []
    for start in range(0, len(words), words_per_beat):
        beats.append(sum(word_value(w) << (BITS * bank * s) for s, w in enumerate(words[start:start + words_per_beat])))
    return beats


# --- InputLoader ------------------------------------------------------------------------

@pytest.mark.parametrize("words_per_beat, bus_bits, write_words",
                         [(4, 128, 1), (1, 32, 1), (3, 112, 1), (4, 128, 4), (5, 176, 2), (3, 112, 3)])
def test_input_loader_writes_the_beats(words_per_beat, bus_bits, write_words):
    """Random valid gaps; the last beat only partly used (its other bits are garbage that
    must not be written); ready low after the last word until ``rearm``; two inferences.
    Several words a cycle: a beat's last write may hold fewer (its other lanes disabled)."""
    bank = 4
    placement = TensorPlacement(base=5, channels=6, height=3, width=1, words_per_pixel=2)
    words = placement.words                                        # 6: not a multiple of 4
    dut = InputLoader(placement, words_per_beat, bus_bits, addr_bits=5, lanes=bank, data_bits=BITS,
                      write_words=write_words)
    rng = np.random.default_rng(words_per_beat)
    n_beats = math.ceil(words / words_per_beat)

    async def inference(ctx, cycle0):
        data = [[int(v) for v in rng.integers(-128, 128, bank)] for _ in range(words)]
        # Garbage in the unused slots of the last beat and in the bus bits past the words.
        padded = data + [[int(v) for v in rng.integers(-128, 128, bank)] for _ in range(n_beats * words_per_beat - words)]
        garbage = int(rng.integers(0, 2 ** 16)) << (words_per_beat * bank * BITS)
        beats = [(b | garbage) & ((1 << bus_bits) - 1) for b in beats_of(padded, words_per_beat, bank)]
        sent, writes, first_beats, dones, cycle = 0, [], [], [], cycle0
        while not dones:
            valid = sent < len(beats) and rng.random() < 0.6
            ctx.set(dut.beats.valid, valid)
            ctx.set(dut.beats.payload, beats[sent] if sent < len(beats) else 0)
            taken = valid and ctx.get(dut.beats.ready)
            if ctx.get(dut.first_beat):
                first_beats.append((cycle, sent))
                assert taken
            if ctx.get(dut.write.valid):
                p = ctx.get(dut.write.payload)
                # Word by word: (address, data) of the words whose lanes are enabled.
                data_in = [int(v) for v in p.data]
                lanes = [(p.lanes >> (k * bank)) & ((1 << bank) - 1) for k in range(write_words)]
                assert all(mask in (0, (1 << bank) - 1) for mask in lanes)
                assert lanes == sorted(lanes, reverse=True), "enabled words come first"
                writes.append([(p.addr + k, data_in[k * bank:(k + 1) * bank]) for k in range(write_words) if lanes[k]])
            if ctx.get(dut.done):
                dones.append(len(writes))
            await ctx.tick()
            sent += bool(taken)
            cycle += 1
            assert cycle - cycle0 < 50 * n_beats
        assert sent == n_beats
        assert [w for write in writes for w in write] == [(placement.base + n, data[n]) for n in range(words)]
        # As many words a write as the beat and the input have left, up to write_words.
        per_beat = [min(words_per_beat, words - start) for start in range(0, words, words_per_beat)]
        assert [len(w) for w in writes] == [min(write_words, n - k) for n in per_beat for k in range(0, n, write_words)]
        assert first_beats == [(first_beats[0][0], 0)]              # one pulse, on the first beat
        assert dones == [len(writes)]                                 # one pulse, with the last word
        # Waiting for rearm: ready stays low and nothing is written, whatever the bus does.
        ctx.set(dut.beats.valid, 1)
        for _ in range(10):
            assert not ctx.get(dut.beats.ready) and not ctx.get(dut.write.valid)
            assert not ctx.get(dut.first_beat) and not ctx.get(dut.done)
            await ctx.tick()
        ctx.set(dut.beats.valid, 0)
        ctx.set(dut.rearm, 1)
        assert not ctx.get(dut.beats.ready)
        await ctx.tick()
        ctx.set(dut.rearm, 0)
        assert ctx.get(dut.beats.ready)
        return cycle

    async def bench(ctx):
        assert ctx.get(dut.beats.ready)                    # armed out of reset
        cycle = await inference(ctx, 0)
        await inference(ctx, cycle)

    run_bench(dut, bench)


@pytest.mark.parametrize("words_per_beat, write_words", [(4, 4), (16, 4), (5, 2), (3, 1)])
def test_input_loader_takes_a_beat_as_the_last_one_leaves(words_per_beat, write_words):
    """With the bus always valid, a beat is taken every ceil(words_per_beat / write_words)
    cycles (the next enters in the cycle of the previous one's last write), and the whole
    input takes one write cycle a write: 23 words of 4 lanes in ceil(23 / write_words)."""
    bank = 4
    placement = TensorPlacement(base=0, channels=92, height=1, width=1, words_per_pixel=23)
    dut = InputLoader(placement, words_per_beat, words_per_beat * bank * BITS, addr_bits=6, lanes=bank,
                      data_bits=BITS, write_words=write_words)
    n_beats = math.ceil(23 / words_per_beat)

    async def bench(ctx):
        ctx.set(dut.beats.valid, 1)
        taken, writes, cycle = [], [], 0
        while True:
            if ctx.get(dut.beats.ready):
                taken.append(cycle)
            if ctx.get(dut.write.valid):
                writes.append(cycle)
            if ctx.get(dut.done):
                break
            await ctx.tick()
            cycle += 1
            assert cycle < 200
        period = math.ceil(words_per_beat / write_words)
        assert taken == [k * period for k in range(n_beats)]
        per_beat = [min(words_per_beat, 23 - start) for start in range(0, 23, words_per_beat)]
        assert len(writes) == sum(math.ceil(n / write_words) for n in per_beat)
        assert writes == list(range(1, 1 + len(writes))), "a write every cycle from the first beat's on"

    run_bench(dut, bench)


# --- OutputUnit ---------------------------------------------------------------------------

def _requant(n: int) -> Requantization:
    return Requantization(np.full(n, 2 ** 30, dtype=np.int64), np.full(n, 40, dtype=np.int64), 0, -128)


def _dense_program(n_out: int, bus_bits: int, batch: int = 1):
    rng = np.random.default_rng(n_out)
    layer = DenseLayer("fc", rng.integers(-5, 6, (n_out, 6)).astype(np.int8), np.zeros(n_out, np.int32),
                       QuantParams(0.1, 0), QuantParams(0.1, 0), _requant(n_out))
    model = QuantizedModel("fc", (6,), QuantParams(0.1, 0), (layer,))
    return lower(model, AcceleratorConfig(rows=2, cols=4, input_bus_bits=bus_bits), batch=batch)


def _conv_program(bus_bits: int, size: int = 2):
    rng = np.random.default_rng(5)
    layer = Conv2dLayer("conv", rng.integers(-5, 6, (5, 2, 1, 1)).astype(np.int8), np.zeros(5, np.int32),
                        QuantParams(0.1, 0), QuantParams(0.1, 0), _requant(5))
    model = QuantizedModel("conv", (2, size, size), QuantParams(0.1, 0), (layer,))
    return lower(model, AcceleratorConfig(rows=2, cols=4, input_bus_bits=bus_bits))


def _run_output_unit(program, memories, seed, *, ready_probability=0.5):
    """For each memory image, pulse start and collect the beats (random back-pressure).
    Returns, per run, the list of (values, classes, last) beats, the done pulses and the
    cycles from start to done."""
    widths = Widths.of(program)
    dut = OutputUnit(program, widths)
    rng = np.random.default_rng(seed)
    runs = []

    async def bench(ctx):
        delay_read = ReadLatency([0] * program.config.bank_width)
        for mem in memories:
            ctx.set(dut.start, 1)
            beats, dones, addr, cycles = [], 0, None, 0
            while True:
                ready = rng.random() < ready_probability
                ctx.set(dut.beats.ready, ready)
                if ctx.get(dut.beats.valid) and ready:
                    p = ctx.get(dut.beats.payload)
                    beats.append((p.values, p.classes, p.last))
                done = ctx.get(dut.done)
                dones += done
                addr = ctx.get(dut.read.addr)
                await ctx.tick()
                ctx.set(dut.start, 0)
                ctx.set(dut.read.data, delay_read(mem[addr] if addr < len(mem) else [0] * program.config.bank_width))
                cycles += 1
                assert cycles < 500, "no last beat"
                if done:
                    break
            # Idle after done: no more beats.
            for _ in range(5):
                ctx.set(dut.beats.ready, 1)
                assert not ctx.get(dut.beats.valid) and not ctx.get(dut.done)
                await ctx.tick()
            runs.append((beats, dones, cycles))

    run_bench(dut, bench)
    return runs


def _memory_with_output(program, rng, values):
    """A memory image: random everywhere, ``values`` (flat, channels-last lane order) in the
    output tensor's words; lanes past the channels hold 127 (they must never win)."""
    bank = program.config.bank_width
    out = program.output
    mem = [[int(v) for v in rng.integers(-128, 128, bank)] for _ in range(program.activation_words)]
    words = np.asarray(values).reshape(out.words, bank)
    for n in range(out.words):
        mem[out.base + n] = [int(v) for v in words[n]]
    return mem


def _check_beats(program, mem, beats):
    bank, wpb, out = program.config.bank_width, program.words_per_beat, program.output
    words = [mem[out.base + n] for n in range(out.words)]
    want = beats_of(words, wpb, bank)
    used = (1 << (wpb * bank * BITS)) - 1
    assert len(beats) == len(want) == program.output_beats
    for index, ((values, _, last), exp) in enumerate(zip(beats, want)):
        if index == len(want) - 1:
            # The last beat's slots past the tensor are 0.
            used = (1 << ((out.words - index * wpb) * bank * BITS)) - 1
            assert values & ~used == 0, f"beat {index}: slots past the tensor are not 0"
        assert values & used == exp, f"beat {index}"
        assert last == (index == len(want) - 1)


@pytest.mark.parametrize("n_out, bus_bits", [(10, 128), (10, 64), (3, 32)])
def test_output_unit_classifier(n_out, bus_bits):
    """Beats carry the logits; the class is the argmax, lowest index on ties (forced by
    drawing logits from a few values), garbage lanes past the logits never win."""
    program = _dense_program(n_out, bus_bits)
    assert program.is_classifier
    bank = program.config.bank_width
    rng = np.random.default_rng(n_out + bus_bits)
    logit_sets = [rng.choice([-2, 0, 3, 5], size=n_out) for _ in range(6)]
    logit_sets += [np.full(n_out, -128), np.full(n_out, 127), np.arange(n_out)[::-1] - 128]
    logit_sets.append(np.where(np.arange(n_out) == n_out - 1, 9, 1))       # the last logit wins
    memories = []
    for logits in logit_sets:
        lanes = np.full(program.output.words * bank, 127)
        lanes[:n_out] = logits
        memories.append(_memory_with_output(program, rng, lanes))
    runs = _run_output_unit(program, memories, seed=n_out)
    for logits, mem, (beats, dones, _) in zip(logit_sets, memories, runs):
        _check_beats(program, mem, beats)
        assert dones == 1
        want = 1 << int(np.argmax(logits))                  # NumPy: the first maximum
        assert beats[-1][1] == want, f"logits {list(logits)}: classes {beats[-1][1]:#x}, expected {want:#x}"


def test_output_unit_non_classifier_gives_no_class():
    """A batch of two vectors and (5, 2, 2) and (5, 4, 4) tensors are not classifier
    outputs: classes 0. (Under back-pressure: the next beat is read while one waits.)"""
    for program in (_dense_program(10, 64, batch=2), _conv_program(64), _conv_program(256, size=4)):
        assert not program.is_classifier
        rng = np.random.default_rng(3)
        lanes = rng.integers(-128, 128, program.output.words * program.config.bank_width)
        mem = _memory_with_output(program, rng, lanes)
        (beats, dones, _), = _run_output_unit(program, [mem], seed=4, ready_probability=0.3)
        _check_beats(program, mem, beats)
        assert dones == 1 and all(classes == 0 for _, classes, _ in beats)


def test_output_unit_class_is_on_the_last_beat_only():
    """Logits spread over two beats: the class is known, and given, only on the last."""
    program = _dense_program(10, 64)                       # 3 words of 4 lanes, 2 words a beat: 2 beats
    assert program.output_beats == 2
    rng = np.random.default_rng(0)
    logits = np.zeros(10, np.int64)
    logits[9] = 50                                         # the winner is in the second beat
    lanes = np.full(program.output.words * program.config.bank_width, -128)
    lanes[:10] = logits
    mem = _memory_with_output(program, rng, lanes)
    (beats, _, _), = _run_output_unit(program, [mem], seed=1, ready_probability=1.0)
    assert [classes for _, classes, _ in beats] == [0, 1 << 9]


def test_output_unit_streams_a_word_a_cycle():
    """Taken at once, a tensor's beats stream a word a cycle: the next beat is read while
    one lands and is sent (a (5, 4, 4) tensor on a 256-bit bus: 32 words in 4 beats of 8).
    A classifier's beat waits for the tournament: its cycles are pinned too."""
    latency = ActivationMemory.READ_LATENCY
    program = _conv_program(256, size=4)
    assert (program.output.words, program.words_per_beat) == (32, 8)
    rng = np.random.default_rng(2)
    lanes = rng.integers(-128, 128, program.output.words * program.config.bank_width)
    mem = _memory_with_output(program, rng, lanes)
    (beats, _, cycles), = _run_output_unit(program, [mem], seed=0, ready_probability=1.0)
    _check_beats(program, mem, beats)
    # The start, a word a cycle, the last one's read latency, the cycle its beat is
    # complete in (and moves to be sent) and the cycle it is sent in.
    assert cycles == 1 + program.output.words + latency + 2, cycles
    program = _dense_program(10, 128)                      # one beat of 3 words, 10 logits: 4 rounds
    assert (program.output.words, program.output_beats) == (3, 1)
    (_, _, cycles), = _run_output_unit(program, [_memory_with_output(program, rng, np.arange(12))], seed=0,
                                       ready_probability=1.0)
    # (The tournament's first level is complete with the beat; its 4 rounds after that.)
    assert cycles == 1 + 3 + latency + 1 + 4, cycles


# --- hdl.host ---------------------------------------------------------------------------------

def _expected_words(placement, bank, codes):
    """Channels-last words of ``codes`` [images, C, H, W], zero-padded lanes."""
    p = placement
    words = np.zeros((p.pixels * p.words_per_pixel, bank), np.int64)
    for img in range(p.images):
        for c in range(p.channels):
            for y in range(p.height):
                for x in range(p.width):
                    pixel = (img * p.height + y) * p.width + x
                    words[pixel * p.words_per_pixel + c // bank, c % bank] = codes[img, c, y, x]
    return words


@pytest.mark.parametrize("batch", [1, 2])
def test_pack_input_layout(batch):
    rng = np.random.default_rng(batch)
    layer = Conv2dLayer("conv", rng.integers(-5, 6, (3, 6, 1, 1)).astype(np.int8), np.zeros(3, np.int32),
                        QuantParams(0.1, 0), QuantParams(0.1, 0), _requant(3))
    model = QuantizedModel("conv", (6, 3, 3), QuantParams(0.1, 0), (layer,))
    program = lower(model, AcceleratorConfig(rows=2, cols=4, input_bus_bits=64), batch=batch)
    bank, wpb = program.config.bank_width, program.words_per_beat
    codes = rng.integers(-128, 128, (batch, 6, 3, 3)).astype(np.int8)
    beats = pack_input(program, codes if batch > 1 else codes[0])
    words = _expected_words(program.input, bank, codes.astype(np.int64))
    assert len(beats) == program.input_beats == math.ceil(len(words) / wpb)
    assert beats == beats_of(words.tolist(), wpb, bank)
    assert all(0 <= b < 2 ** program.config.input_bus_bits for b in beats)
    # Decoded back lane by lane.
    for n, word in enumerate(words):
        assert lanes_of(beats[n // wpb] >> (BITS * bank * (n % wpb)), bank) == word.tolist()
    with pytest.raises(ValueError):
        pack_input(program, codes.astype(np.int16))
    with pytest.raises(ValueError):
        pack_input(program, codes.reshape(-1)[:-1])


@pytest.mark.parametrize("batch", [1, 2])
def test_unpack_output_round_trip(batch):
    rng = np.random.default_rng(10 + batch)
    layer = Conv2dLayer("conv", rng.integers(-5, 6, (5, 2, 1, 1)).astype(np.int8), np.zeros(5, np.int32),
                        QuantParams(0.1, 0), QuantParams(0.1, 0), _requant(5))
    model = QuantizedModel("conv", (2, 3, 2), QuantParams(0.1, 0), (layer,))
    program = lower(model, AcceleratorConfig(rows=2, cols=4, input_bus_bits=96), batch=batch)
    bank, wpb = program.config.bank_width, program.words_per_beat
    out = rng.integers(-128, 128, (batch,) + program.output_shape).astype(np.int8)
    words = _expected_words(program.output, bank, out.astype(np.int64)).tolist()
    # Garbage in the padding lanes and in the last beat's unused slots is ignored.
    garbage = rng.integers(-128, 128, (len(words) + wpb, bank)).tolist()
    cw, channels = program.output.words_per_pixel, program.output.channels
    assert (cw, channels) == (2, 5)
    words = [[w[l] if (n % cw) * bank + l < channels else garbage[n][l] for l in range(bank)]
             for n, w in enumerate(words)]
    n_beats = program.output_beats
    padded = words + garbage[:n_beats * wpb - len(words)]
    beats = beats_of(padded, wpb, bank)
    assert len(beats) == n_beats
    got = unpack_output(program, beats)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, out if batch > 1 else out[0])
    with pytest.raises(ValueError):
        unpack_output(program, beats[:-1])
    # The word-level helpers invert each other.
    t_words = tensor_to_words(program.output, bank, out)
    np.testing.assert_array_equal(words_to_tensor(program.output, bank, t_words, program.output_shape),
                                  out if batch > 1 else out[0])
    np.testing.assert_array_equal(int_to_words(words_to_int(t_words), len(t_words), bank), t_words)
