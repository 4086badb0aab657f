"""The run-time weight image: every model-dependent memory of a design, as 32-bit beats.

A design generated with ``AcceleratorConfig(runtime_weights=True)`` keeps its weights,
biases, requantization parameters and the GEMM ops' input zero points in writable
memories (initialised with the compiled model's). A model with the same layer shapes,
compiled for the same configuration, runs on it after its image is loaded.

The image is four sections, in order, each a list of memory words, each word sent as
``ceil(bits / 32)`` beats, least significant first:

1. weights: ``len(weight_words)`` words of ``rows * cols`` lanes of 8 bits (lane
   ``r * cols + c`` is PE ``(r, c)``'s);
2. biases: one word per parameter word, ``cols`` lanes of ``accumulator_bits``;
3. requantization parameters: one word per parameter word
   (:func:`~hdl.gateware.requantizer.requant_params_layout`);
4. input zero points: one 8-bit word per GEMM op, in program order.

The last beat carries TLAST.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from hdl.compiler.program import GemmOp, Program
from hdl.compiler.weight_packing import LANE_BITS

BEAT_BITS = 32
SECTIONS = ("weights", "biases", "requant", "zero_points")


def pack_values(values, bits: int) -> int:
    """Integers (two's complement) into one word, element 0 least significant."""
    word = 0
    for index, value in enumerate(values):
        word |= (int(value) & ((1 << bits) - 1)) << (index * bits)
    return word


def weight_word_values(program: Program) -> list[int]:
    """Section 1: each weight word, lane ``r * cols + c`` at bits ``[8 * lane, 8 * lane + 8)``."""
    words = np.asarray(program.weight_words).reshape(len(program.weight_words), -1)
    return [int.from_bytes(row.astype(np.int8).tobytes(), "little") for row in words]


def bias_word_values(program: Program) -> list[int]:
    """Section 2 (also the bias memory's contents)."""
    return [pack_values(b, program.config.accumulator_bits) for b in program.bias]


def requant_word_values(program: Program) -> list[int]:
    """Section 3 (also the requantization-parameter memory's contents)."""
    from hdl.gateware.requantizer import requant_params_layout
    layout = requant_params_layout(program.config.cols, program.config.data_bits)
    return [layout.const({"multiplier": [int(v) for v in program.multiplier[n]],
                          "shift": [int(v) for v in program.shift[n]],
                          "zero_point": int(program.zero_point[n]),
                          "clamp_min": int(program.clamp_min[n]),
                          "clamp_max": int(program.clamp_max[n])}).as_value().value
            for n in range(len(program.bias))]


def zero_point_values(program: Program) -> list[int]:
    """Section 4: each GEMM op's input zero point, as an 8-bit two's-complement word."""
    return [op.input_zero_point & 0xFF for op in program.gemm_ops]


@dataclass(frozen=True)
class ImageLayout:
    """Words and word widths of each section of a program's image."""
    words: tuple[int, int, int, int]
    bits: tuple[int, int, int, int]

    @classmethod
    def of(cls, program: Program) -> "ImageLayout":
        from hdl.gateware.requantizer import requant_params_layout
        cfg = program.config
        params = len(program.bias)
        return cls((len(program.weight_words), params, params, len(program.gemm_ops)),
                   (cfg.rows * cfg.cols * LANE_BITS, cfg.cols * cfg.accumulator_bits,
                    requant_params_layout(cfg.cols, cfg.data_bits).size, cfg.data_bits))

    @property
    def beats_per_word(self) -> tuple[int, ...]:
        return tuple(math.ceil(b / BEAT_BITS) for b in self.bits)

    @property
    def beats(self) -> int:
        return sum(w * b for w, b in zip(self.words, self.beats_per_word))


def image_beats(program: Program) -> list[int]:
    """The image of ``program`` as 32-bit beat values (the last one carries TLAST)."""
    layout = ImageLayout.of(program)
    sections = (weight_word_values(program), bias_word_values(program), requant_word_values(program),
                zero_point_values(program))
    beats = []
    for values, per_word in zip(sections, layout.beats_per_word):
        for value in values:
            beats.extend((value >> (BEAT_BITS * i)) & ((1 << BEAT_BITS) - 1) for i in range(per_word))
    assert len(beats) == layout.beats
    return beats


def _structure(op):
    """An op without what the image carries (its input zero point) or what only bounds it."""
    if isinstance(op, GemmOp):
        return dataclasses.replace(op, input_zero_point=0, accumulator_bits_needed=0)
    return op


def check_loadable(generated: Program, new: Program):
    """Raise ``ValueError`` unless ``new``'s image can run on hardware generated for
    ``generated``: the same configuration (with run-time weights), ops, placements and
    memory sizes; only the weights, biases, requantization and zero points may differ."""
    if not generated.config.runtime_weights:
        raise ValueError("the design was generated with ROM weights; generate it with runtime_weights=True")
    if new.config != generated.config:
        raise ValueError(f"the new model is compiled for another configuration ({new.config}, "
                         f"not {generated.config})")
    if len(new.ops) != len(generated.ops):
        raise ValueError(f"the new model has {len(new.ops)} ops, the design {len(generated.ops)}")
    for index, (a, b) in enumerate(zip(generated.ops, new.ops)):
        if _structure(a) != _structure(b):
            raise ValueError(f"op {index} ({b.name}) differs in shape from the design's ({a.name}): "
                             f"only weights, biases, scales and zero points may change")
    for name in ("input", "output", "output_shape", "activation_words", "batch"):
        if getattr(new, name) != getattr(generated, name):
            raise ValueError(f"the new model's {name} differs from the design's")
    stackings = [s and dataclasses.replace(s, fill=0) for s in (generated.input_stacking, new.input_stacking)]
    if stackings[0] != stackings[1]:                   # the fill (a zero point) is the host's
        raise ValueError("the new model's input stacking differs from the design's")
    if ImageLayout.of(new) != ImageLayout.of(generated):
        raise ValueError("the new model's memories differ in size from the design's")
