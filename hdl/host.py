"""Host-side API: pack inputs into ``input_data`` beats and unpack ``output_values`` beats.

A beat carries ``words_per_beat`` activation-memory words (see :mod:`hdl.compiler.program`), word
``w`` of the beat in bits ``[w * B * 8, (w + 1) * B * 8)``, lane ``l`` of a word in bits
``[l * 8, l * 8 + 8)`` as two's complement. The tensor is channels-last, each pixel's
channels padded with zeros to a whole number of words, or packed without padding when the
program's input is, or planar (word 0 of every pixel, then word 1, ...) when only
taps-on-rows depthwise convolutions read it (see :mod:`hdl.compiler.program`). Where the program stacks the first
convolution's kernel rows into the input (``program.input_stacking``), :func:`pack_input`
sends the stacked tensor.
"""
from __future__ import annotations

import math

import numpy as np

from hdl.compiler.program import Program, TensorPlacement


def tensor_to_words(placement: TensorPlacement, bank_width: int, codes: np.ndarray) -> np.ndarray:
    """``images`` tensors of int8 codes (each ``(C, H, W)`` or ``(C,)``) to ``[words, B]``."""
    codes = np.asarray(codes)
    p = placement
    nchw = codes.reshape(p.images, p.channels, p.height, p.width)
    if p.packed_lanes:
        packed = np.zeros(p.words * bank_width, np.int8)
        packed[:p.pixels * p.channels] = nchw.transpose(0, 2, 3, 1).reshape(-1)
        return packed.reshape(-1, bank_width)
    padded = np.zeros((p.images, p.height, p.width, p.words_per_pixel * bank_width), np.int8)
    padded[..., :p.channels] = nchw.transpose(0, 2, 3, 1)
    if p.planar:                    # word g of every pixel, then word g + 1 ...
        return padded.reshape(p.pixels, p.words_per_pixel, bank_width).transpose(1, 0, 2).reshape(-1, bank_width)
    return padded.reshape(-1, bank_width)


def words_to_tensor(placement: TensorPlacement, bank_width: int, words: np.ndarray,
                    shape: tuple[int, ...]) -> np.ndarray:
    """The inverse of :func:`tensor_to_words`; ``shape`` is the shape of one image."""
    p = placement
    words = np.asarray(words, dtype=np.int8)
    if p.packed_lanes:
        nhwc = words.reshape(-1)[:p.pixels * p.channels].reshape(p.images, p.height, p.width, p.channels)
    elif p.planar:
        nhwc = words.reshape(p.words_per_pixel, p.pixels, -1).transpose(1, 0, 2).reshape(p.images, p.height, p.width, -1)
    else:
        nhwc = words.reshape(p.images, p.height, p.width, -1)
    out = nhwc[..., :p.channels].transpose(0, 3, 1, 2)
    return out.reshape(((p.images,) if p.images > 1 else ()) + tuple(shape))


def words_to_int(words: np.ndarray) -> int:
    """Pack ``[n, B]`` int8 lanes little-endian into one integer."""
    return int.from_bytes(np.asarray(words, dtype=np.int8).tobytes(), "little")


def int_to_words(value: int, n_words: int, bank_width: int) -> np.ndarray:
    raw = value.to_bytes(n_words * bank_width, "little")
    return np.frombuffer(raw, dtype=np.int8).reshape(n_words, bank_width)


def pack_input(program: Program, codes: np.ndarray) -> list[int]:
    """One inference's int8 input codes (``batch`` inputs when the program has a batch)
    to the list of ``input_data`` beat values."""
    codes = np.asarray(codes)
    expected = math.prod(program.input_shape) * program.batch
    if codes.dtype != np.int8 or codes.size != expected:
        raise ValueError(f"input must be {expected} int8 codes, not {codes.size} of {codes.dtype}")
    if program.input_stacking:
        codes = program.input_stacking.stack(codes.reshape(program.batch, *program.input_shape))
    words = tensor_to_words(program.input, program.config.bank_width, codes)
    per_beat = program.words_per_beat
    return [words_to_int(words[i:i + per_beat]) for i in range(0, len(words), per_beat)]


def unpack_output(program: Program, beats: list[int]) -> np.ndarray:
    """The ``output_values`` beats of one inference to int8 codes of the output shape
    (with a leading batch dimension when the program has a batch)."""
    if len(beats) != program.output_beats:
        raise ValueError(f"expected {program.output_beats} output beats, not {len(beats)}")
    per_beat, bank = program.words_per_beat, program.config.bank_width
    words = np.concatenate([int_to_words(b, per_beat, bank) for b in beats])[:program.output.words]
    return words_to_tensor(program.output, bank, words, program.output_shape)
