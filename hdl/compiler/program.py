"""Lowering a :class:`QuantizedModel` to a program for the array, and memory images.

Everything the array runs is a *GEMM op*: a convolution over a channels-last activation
tensor (a dense layer is a 1x1 convolution on a 1x1 image whose channels are the
features; a dense layer after ``Flatten`` is a convolution whose kernel covers the whole
image). Max-pooling is a *pool op*. ``Flatten`` costs nothing: the following dense
layer's weights are permuted into the memory's order at compile time.

Activation memory
-----------------
Words of ``B = lcm(rows, cols)`` int8 lanes. A tensor ``(C, H, W)`` at word ``base``
keeps pixel ``p = y * W + x`` in words ``base + p * CW ... base + p * CW + CW - 1``,
``CW = ceil(C / B)``; channel ``c`` is lane ``c % B`` of word ``c // B`` of its pixel.
Lanes past ``C`` hold defined but meaningless values; their weights are zero.

A *packed* tensor (one whose consumer folds, see below, written by the input loader, a
GEMM op or a max-pool of more than one tap) has no padding lanes: channel ``c`` of pixel ``p`` is element ``e = p * C + c``, lane ``e % B`` of
word ``base + e // B``. Guard words before and after it keep every read of a folded window
inside the memory.

Folding kernel taps into the reduction
--------------------------------------
With few input channels most rows of the array would idle: a 1-channel 5x5 convolution
uses one row of eight. A *folded* convolution reads a packed input, where the ``kw * C``
values of one kernel row of a window are consecutive elements. Its reduction runs over
kernel rows ``i`` and, within one, tiles ``t`` of ``rows`` consecutive elements: row ``r``
of tile ``t`` multiplies element ``t * rows + r`` of the kernel row, i.e. tap
``j = (t * rows + r) // C`` and channel ``(t * rows + r) % C``. A tile spans at most two
words; the memory's two banks read both at once. Rows whose tap lies in the horizontal
padding read the zero point, like padding taps do; rows past the kernel row have zero
weights. The lowering folds only where it saves tiles.

Kernel rows stacked into the network input
------------------------------------------
Folding still spends ``kh`` tile sets on a first layer with few channels: LeNet's 1-channel
5x5 convolution takes 5 tiles of 5 useful rows on 16 rows. When the first layer is a
convolution, the host can send its input with the ``kh`` input rows of each output row
stacked as channels (:class:`RowStacking`): stacked pixel ``(y, x)`` holds channel ``c`` of
input row ``y * sy - py + i`` at channel ``i * C + c``, the zero point where that row is
vertical padding. The layer becomes a ``1 x kw`` convolution of ``kh * C`` channels, with
the same sums in another order (exact), and its kernel row of ``kh * kw * C`` values folds
into ``ceil(kh * kw * C / rows)`` tiles: 2 instead of 5 on 16 rows. The input grows about
``kh / sy`` times; the lowering stacks only when the tiles saved outweigh the longer load.

Schedule of a GEMM op (this order is what the hardware step generator produces)::

    for nt in range(n_tiles):                  # output-channel tile (cols channels)
      for block in pixel blocks of <= accumulator_depth output pixels:
        for (i, j, ct) in kernel taps x channel tiles:   # one weight tile each
          for m in block:                      # one step = one activation vector
            step(...)

Weight tile ``(nt, i, j, ct)`` holds ``w[nt*cols + c, ct*rows + r, i, j]`` at PE ``(r, c)``.
A layer's tiles are packed at its weight width (:mod:`hdl.compiler.weight_packing`).
The zero point of the input is folded into the bias: ``bias_eff = bias - zp * sum(w)``;
padding taps read the zero point, so they add ``zp * w`` that the fold removes.

Depthwise convolutions with their taps on the rows
--------------------------------------------------
A depthwise convolution's output channel reads one input channel, so the array's usual
mapping (input channels on the rows, output channels on the columns) leaves all but one
PE of a column idle. Where ``cols`` is the bank width, a *taps-on-rows* op puts kernel
taps on the rows and the ``cols`` channels of one activation word on the columns: row
``r`` of tap tile ``k`` receives the whole word of tap ``k * rows + r`` of the window,
and PE ``(r, c)`` multiplies its lane ``c``. A window buffer in the GEMM engine holds
``kh`` input rows of ``kw`` words; each new output pixel pushes ``sy`` rows into it (``kh``
at the top of a column), one read each. Its input is stored *planar*: word ``g`` of pixel
``p`` at ``base + g * P + p`` (``P`` pixels of the batch), so that a window row's ``kw``
words are consecutive and one read returns them. The schedule::

    for nt in range(n_tiles):                  # channel word
      for image, ox:                           # output columns, top to bottom
        for oy in range(out_h):                # max(sy, tap tiles) cycles each (after the first)
          push kh (oy = 0) or sy rows, the last push with tap tile 0
          tap tiles 1 ... ceil(kh * kw / rows) - 1, beside the next pixel's pushes

A tensor is planar when a Conv2d or Linear writes it, or it is the model's input (the host
sends it planar), and every reader is such an op.

Reductions split over columns
-----------------------------
A dense layer with fewer outputs than the array has columns, or a last tile of few
outputs (``Linear(1000, 10)`` on 8 columns: 10 of 16 columns busy), leaves columns idle.
A *split* op spreads each output's reduction over ``S`` adjacent columns: column ``c`` of
output tile ``nt`` sums output ``nt * cols / S + c // S`` over the inputs ``k`` with
``k % S == c % S``, and a stage after the accumulators adds each group of ``S`` columns
before the requantizer. Step ``kt`` of a pixel reads the ``rows * S`` consecutive inputs
from element ``kt * rows * S`` of the pixel on (``S * rows / B`` whole words, at most
:data:`READ_WORDS`), and PE ``(r, c)`` multiplies element ``r * S + c % S`` of them; weight
tile ``(nt, kt)`` holds ``w[nt * cols / S + c // S, (kt * rows + r) * S + c % S]`` at PE
``(r, c)``. Only the first column of a group carries the bias. The lowering splits 1x1
layers (dense, or 1x1 convolutions of stride 1 without padding) of an unpacked input into
a tensor that is neither planar nor packed, at the ``S`` with the fewest steps, where
that makes the program's steps, with the cycle the adding stage costs every GEMM op, at
least :data:`SPLIT_MIN_SAVING` fewer (``Linear(1000, 10)`` on 8x8: 250 steps become 160
at ``S = 4``; LeNet's last layer would save 46 of its 55,000, not worth the stage).
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass, field

import numpy as np

from pytorch_ref.ir.quantized_model import (AddLayer, ConcatLayer, Conv2dLayer, DenseLayer, FlattenLayer, MaxPool2dLayer,
                                            QuantizedModel)

from hdl.compiler import weight_packing
from hdl.config import AcceleratorConfig
from pytorch_ref.ir import integer_semantics as sem



@dataclass(frozen=True)
class TensorPlacement:
    """Where ``images`` tensors ``(C, H, W)`` live in the activation memory (one after
    the other, a batch)."""
    base: int
    channels: int
    height: int
    width: int
    words_per_pixel: int
    images: int = 1
    packed_lanes: int = 0       # B when the tensor is packed (see the module docstring), else 0
    planar: bool = False        # words of one channel word of all pixels together (see the module docstring)

    @property
    def pixels(self) -> int:
        return self.images * self.height * self.width

    @property
    def pixel_stride(self) -> int:
        """Words from one pixel to the next, or elements when packed."""
        return self.channels if self.packed_lanes else self.words_per_pixel

    @property
    def words(self) -> int:
        if self.packed_lanes:
            return _ceil_div(self.pixels * self.channels, self.packed_lanes)
        return self.pixels * self.words_per_pixel


@dataclass(frozen=True)
class RowStacking:
    """How the host stacks the first convolution's kernel rows into the input's channels
    (see the module docstring): ``(C, H, W)`` becomes ``(kernel_rows * C, H_out, W)``."""
    kernel_rows: int
    stride: int                 # the convolution's vertical stride and padding
    padding: int
    fill: int                   # the input zero point, read by vertical padding

    def stacked_shape(self, shape: tuple[int, int, int]) -> tuple[int, int, int]:
        c, h, w = shape
        return self.kernel_rows * c, (h + 2 * self.padding - self.kernel_rows) // self.stride + 1, w

    def stack(self, images: np.ndarray) -> np.ndarray:
        """``[n, C, H, W]`` codes to ``[n, kernel_rows * C, H_out, W]``."""
        n, c, h, w = images.shape
        padded = np.full((n, c, h + 2 * self.padding, w), self.fill, dtype=images.dtype)
        padded[:, :, self.padding:self.padding + h] = images
        tops = np.arange(self.stacked_shape((c, h, w))[1]) * self.stride
        return np.concatenate([padded[:, :, tops + i] for i in range(self.kernel_rows)], axis=1)

    def stack_kernel(self, kernel: np.ndarray) -> np.ndarray:
        """``[N, C, kh, kw]`` weights to the stacked layer's ``[N, kh * C, 1, kw]``."""
        n, c, kh, kw = kernel.shape
        return kernel.transpose(0, 2, 1, 3).reshape(n, kh * c, 1, kw)


@dataclass(frozen=True)
class WindowOp:
    """An op that slides a window over its source tensor into its destination."""
    name: str
    source: TensorPlacement
    dest: TensorPlacement
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]


@dataclass(frozen=True)
class GemmOp(WindowOp):
    """A convolution (or dense layer) on the array."""
    channel_tiles: int          # ceil(C_in / rows)
    n_tiles: int                # ceil(C_out / cols)
    block: int                  # output pixels per accumulator pass
    weight_base: int            # tile address of the first weight tile (see weight_packing)
    param_base: int             # first parameter word (one per n tile)
    input_zero_point: int
    macs: int                   # useful multiply-accumulates (real fan-in x outputs)
    accumulator_bits_needed: int = 0   # proven bound of this layer's sums (see check_accumulator)
    row_tiles: int = 0          # folded: tiles of ``rows`` elements per kernel row; 0: not folded
    weight_bits: int = 8        # width of the layer's weight codes, packed in its words
    #: A channel-wise op (see ``_Lowering.channelwise``): output tile ``nt`` reads its input
    #: channel tiles from word ``nt`` of each pixel on (``cols`` channels a word).
    diagonal: bool = False
    #: A taps-on-rows depthwise op (see the module docstring): its tap tiles; 0: not one.
    tap_tiles: int = 0
    #: A split op (see the module docstring): the columns one output's reduction spans; 1: not split.
    split: int = 1

    @property
    def folded(self) -> bool:
        return self.row_tiles > 0

    def split_words(self, config: AcceleratorConfig) -> int:
        """Words one step of a split op reads (``rows * split / B``); 0 when not split."""
        return self.split * config.rows // config.bank_width if self.split > 1 else 0

    @property
    def pixels(self) -> int:
        return self.dest.pixels

    @property
    def taps_per_row(self) -> int:
        """Reduction steps per kernel row: tiles of a folded row, or taps x channel tiles."""
        return self.row_tiles if self.folded else self.kernel[1] * self.channel_tiles

    @property
    def k_tiles(self) -> int:
        return self.tap_tiles or self.kernel[0] * self.taps_per_row

    @property
    def compute_steps(self) -> int:
        """Steps that use the array: one weight tile each."""
        return self.n_tiles * self.k_tiles * self.pixels

    @property
    def steps(self) -> int:
        """Cycles the step generator issues: the compute steps, and for a taps-on-rows op
        the window buffer's pushes that no compute step shares."""
        if not self.tap_tiles:
            return self.compute_steps
        d = self.dest
        column = self.kernel[0] + (d.height - 1) * self.slot_cycles + self.tap_tiles - 1
        return self.n_tiles * d.images * d.width * column

    @property
    def slot_cycles(self) -> int:
        """A taps-on-rows op's cycles per output pixel after a column's first:
        ``max(sy, tap_tiles)`` (see :mod:`hdl.gateware.taps_on_rows_steps`)."""
        return max(self.stride[0], self.tap_tiles)

    @property
    def window_depth(self) -> int:
        """Rows of the window buffer a taps-on-rows op needs: its kernel's, and the rows
        pushed for the next output pixel while this one's last tiles compute."""
        return self.kernel[0] + min(self.stride[0], self.tap_tiles) - 1


@dataclass(frozen=True)
class PoolOp(WindowOp):
    """Max-pooling, a pass of its own over the activation memory. Each read takes
    ``words_per_read`` consecutive words of a pixel's channels, for ``taps_per_read``
    horizontally consecutive taps (a whole kernel row, when the pixel's words fit a read
    that many times and there is no horizontal padding: consecutive pixels are consecutive
    words). The engine writes a result a word a cycle, so the lowering reads no more at
    once than the window's reads leave time to write (one word more when the destination
    is packed: the lanes straddle a word)."""
    words_per_read: int = 1
    taps_per_read: int = 1

    @property
    def reads_per_pixel(self) -> int:
        return _ceil_div(self.source.words_per_pixel, self.words_per_read)

    @property
    def read_words(self) -> int:
        """Words one read returns."""
        return self.words_per_read * self.taps_per_read

    @property
    def steps(self) -> int:
        """Memory reads: one per read of a kernel row's taps per read of an output pixel's channels."""
        return self.dest.pixels * self.reads_per_pixel * self.kernel[0] * self.kernel[1] // self.taps_per_read


@dataclass
class Program:
    """The compiled model: ops in order plus the memory images they use."""
    config: AcceleratorConfig
    model_name: str
    ops: list[GemmOp | PoolOp]
    input: TensorPlacement
    output: TensorPlacement
    output_shape: tuple[int, ...]
    activation_words: int
    batch: int                        # inputs per inference (one after the other in memory)
    weight_words: np.ndarray          # int8 [words, rows, cols] lane bytes (see weight_packing)
    bias: np.ndarray                  # int64 [param words, cols]   (zero point folded in)
    multiplier: np.ndarray            # int64 [param words, cols]
    shift: np.ndarray                 # int64 [param words, cols]
    zero_point: np.ndarray            # int64 [param words]
    clamp_min: np.ndarray             # int64 [param words]
    clamp_max: np.ndarray             # int64 [param words]
    layer_names: list[str] = field(default_factory=list)
    input_shape: tuple[int, ...] = ()            # one image, as the model takes it
    input_stacking: RowStacking | None = None    # how the host stacks it into ``input``
    weight_payload_bits: int = 0      # bits of the model's own weight codes (no padding)

    @property
    def gemm_ops(self) -> list[GemmOp]:
        return [op for op in self.ops if isinstance(op, GemmOp)]

    @property
    def split_factors(self) -> tuple[int, ...]:
        """The splits of the program's GEMM ops (see the module docstring), in increasing
        order; ``(1,)`` when no op is split."""
        return tuple(sorted({op.split for op in self.gemm_ops}))

    @property
    def weight_formats(self) -> tuple[int, ...]:
        """The weight widths of the program's ops, in increasing order."""
        return tuple(sorted({op.weight_bits for op in self.gemm_ops}))

    def weight_tile(self, address: int, bits: int) -> np.ndarray:
        """The ``[rows, cols]`` codes of the ``bits``-bit tile at tile ``address``."""
        return weight_packing.unpack_tile(self.weight_words, address, bits)

    @property
    def weight_padding(self) -> float:
        """The share of weight-memory bits that hold no weight of the model: tiles'
        padding, unused slots of packed words, and lanes wider than the weights."""
        return 1 - self.weight_payload_bits / self.memory_bits["weights"]

    @property
    def memory_bits(self) -> dict[str, int]:
        """On-chip memory of the generated design, in bits, by memory."""
        cfg = self.config
        params = len(self.bias)
        return {"weights": int(self.weight_words.size) * weight_packing.LANE_BITS,
                "activations": self.activation_words * cfg.bank_width * cfg.data_bits,
                "accumulators": cfg.accumulator_depth * cfg.cols * cfg.accumulator_bits,
                "biases": params * cfg.cols * cfg.accumulator_bits,
                "requantization": params * (cfg.cols * (sem.MULTIPLIER_BITS + sem.SHIFT_MAX.bit_length())
                                            + 3 * cfg.data_bits)}

    @property
    def accumulator_bits_needed(self) -> int:
        """The narrowest accumulator this program's layers provably never overflow."""
        return max(op.accumulator_bits_needed for op in self.gemm_ops)

    @property
    def words_per_beat(self) -> int:
        return self.config.input_values_per_beat // self.config.bank_width

    @property
    def input_beats(self) -> int:
        return math.ceil(self.input.words / self.words_per_beat)

    @property
    def output_beats(self) -> int:
        return math.ceil(self.output.words / self.words_per_beat)

    def fingerprint(self) -> int:
        """The first 32 bits of a SHA-256 over the configuration, the ops, the placements and
        every memory image: equal for the same compiled model, different for another."""
        digest = hashlib.sha256(repr((self.config, self.ops, self.input, self.output, self.output_shape,
                                      self.activation_words, self.batch, self.input_stacking)).encode())
        for image in (self.weight_words, self.bias, self.multiplier, self.shift, self.zero_point,
                      self.clamp_min, self.clamp_max):
            digest.update(np.ascontiguousarray(image).tobytes())
        return int.from_bytes(digest.digest()[:4], "big")

    @property
    def is_classifier(self) -> bool:
        """Whether the output is one vector of at most 10 logits (``output_data`` is its argmax)."""
        return self.batch == 1 and len(self.output_shape) == 1 and self.output_shape[0] <= 10


#: The most consecutive activation words one read returns (the activation memory's banks).
READ_WORDS = 4


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _fold_zero_point(bias: np.ndarray, zero_point: int, kernel: np.ndarray) -> np.ndarray:
    """``bias - zero_point * sum(w)`` per output channel (int64): the input zero point
    folded into the bias (see the module docstring)."""
    return bias.astype(np.int64) - zero_point * kernel.reshape(len(kernel), -1).astype(np.int64).sum(axis=1)


class _Lowering:
    def __init__(self, model: QuantizedModel, config: AcceleratorConfig, batch: int, stack_input_rows: bool,
                 depthwise_taps_on_rows: bool = True, split_reductions: bool = True):
        self.model, self.config, self.batch = model, config, batch
        self.ops = []
        self.words, self.params = [], []
        self.inside: dict[int, tuple[int, int]] = {}        # see written_in_place
        self.allow_taps_on_rows = depthwise_taps_on_rows
        self.planar = self.planar_tensors()
        only_reader = [index for index, reads in enumerate(model.layer_inputs) if 0 in reads] == [0]
        self.stacking = (self.row_stacking(model.layers[0], model.shapes[0])
                         if stack_input_rows and only_reader and 0 not in self.planar else None)
        self.splitting = split_reductions

    def placement(self, shape, base: int) -> TensorPlacement:
        if len(shape) == 1:
            c, h, w = shape[0], 1, 1
        else:
            c, h, w = shape
        return TensorPlacement(base, c, h, w, _ceil_div(c, self.config.bank_width), self.batch)

    def taps_on_rows_fits(self, layer) -> bool:
        """Whether ``layer`` is a depthwise convolution that can run taps-on-rows (see the
        module docstring): a bank word is ``cols`` channels, a window row fits one read,
        and each output pixel's new rows fit the window."""
        cfg = self.config
        if not (self.allow_taps_on_rows and self.is_depthwise(layer) and cfg.bank_width == cfg.cols):
            return False
        kh, kw = layer.weight.shape[2:]
        return kw <= READ_WORDS and layer.stride[0] <= kh

    def planar_tensors(self) -> set[int]:
        """The stored tensors kept planar: the model's input (the host sends it so) or one
        a Conv2d or Linear writes, read only by taps-on-rows ops (and not the model's
        output)."""
        layers, reads = self.model.layers, self.model.layer_inputs
        output = self.stored(len(layers))
        planar = set()
        for t in range(len(layers) + 1):
            if t == output or self.stored(t) != t or (t and not isinstance(layers[t - 1], (Conv2dLayer, DenseLayer))):
                continue
            readers = self.consumers(t)
            if readers and all(self.taps_on_rows_fits(layers[i]) and list(reads[i]) == [t] for i in readers):
                planar.add(t)
        return planar

    def runs_taps_on_rows(self, index: int) -> bool:
        """Whether layer ``index`` runs as a taps-on-rows op: its input is planar."""
        return self.model.layer_inputs[index][0] in self.planar

    def run(self) -> Program:
        cfg, model = self.config, self.model
        if not any(isinstance(layer, (DenseLayer, Conv2dLayer)) for layer in model.layers):
            raise ValueError(f"model {model.name!r} has no Conv2d or Linear layer; the accelerator runs models "
                             f"with at least one")
        layers, reads = model.layers, model.layer_inputs
        placed = self.allocate()
        for index, layer in enumerate(layers):
            if isinstance(layer, FlattenLayer):
                continue
            sources = [placed[self.stored(t)] for t in reads[index]]
            dest = placed[index + 1]
            if isinstance(layer, MaxPool2dLayer):
                self.ops.append(self.pool(layer, sources[0], dest))
            elif isinstance(layer, AddLayer):
                self.ops.append(self.add(layer, *sources, dest))
            elif isinstance(layer, ConcatLayer):
                self.ops.extend(self.concat(layer, reads[index], sources, dest))
            elif self.runs_taps_on_rows(index):
                self.ops.append(self.depthwise_taps_on_rows(layer, sources[0], dest))
            elif self.runs_diagonal(layer):
                self.ops.append(self.depthwise(layer, sources[0], dest))
            elif isinstance(layer, (DenseLayer, Conv2dLayer)):
                after_flatten = self.stored(reads[index][0]) != reads[index][0]
                self.ops.append(self.gemm(layer, sources[0], dest, after_flatten))
            else:
                raise TypeError(f"{layer.name}: layer type {type(layer).__name__} cannot be lowered")
        bias, mult, shift, zp, cmin, cmax = (np.array(v) for v in zip(*self.params))
        output = placed[self.stored(len(layers))]
        # A split op's last read of a pixel may reach past its tensor (into words whose
        # weights are zero); the memory holds those words too.
        split_reads = [op.source.base + op.source.pixels * op.source.words_per_pixel + op.split_words(cfg)
                       for op in self.ops if isinstance(op, GemmOp) and op.split > 1]
        return Program(config=cfg, model_name=model.name, ops=self.ops, input=placed[0],
                       output=output, output_shape=model.output_shape,
                       activation_words=max(1, max(p.base + p.words for p in placed.values()), *split_reads),
                       batch=self.batch,
                       weight_words=np.concatenate(self.words),
                       bias=bias, multiplier=mult, shift=shift, zero_point=zp, clamp_min=cmin,
                       clamp_max=cmax, layer_names=[op.name for op in self.ops],
                       input_shape=tuple(model.shapes[0]), input_stacking=self.stacking,
                       weight_payload_bits=sum(layer.weight.size * layer.weight_bits
                                               for layer in model.weighted_layers))

    def stored(self, t: int) -> int:
        """The tensor that holds tensor ``t``: a flatten's output is its input, viewed anew."""
        while t > 0 and isinstance(self.model.layers[t - 1], FlattenLayer):
            t = self.model.layer_inputs[t - 1][0]
        return t

    def consumers(self, t: int) -> list[int]:
        """The layers (other than flattens) that read stored tensor ``t``, in order."""
        return [index for index, (layer, reads) in enumerate(zip(self.model.layers, self.model.layer_inputs))
                if not isinstance(layer, FlattenLayer) and any(self.stored(r) == t for r in reads)]

    def allocate(self) -> dict[int, TensorPlacement]:
        """Every stored tensor's placement. A chain's tensors alternate between the bottom
        and the top of the memory (ping-pong). A graph's are placed over their lifetimes,
        from their producer to their last reader (the program's end for the output): each
        at the lowest address, aligned to its words per pixel, that no tensor alive at the
        same time holds. The alignment makes the distance between two tensors of one shape
        a whole number of pixels, which an add's view needs (see :meth:`add`)."""
        layers = self.model.layers
        stored = [0] + [index + 1 for index, layer in enumerate(layers) if not isinstance(layer, FlattenLayer)]
        regions = {t: self.region(t) for t in stored}           # (placement at word 0, words)
        if self.model.is_chain:
            low_words = max(regions[t][1] for t in stored[0::2])
            return {t: dataclasses.replace(regions[t][0], base=regions[t][0].base + (low_words if n % 2 else 0))
                    for n, t in enumerate(stored)}
        end = len(layers)
        output = self.stored(end)
        inside = self.inside = self.written_in_place()
        lifetime = {t: (t - 1, end if t == output else max(self.consumers(t))) for t in stored if t not in inside}
        for t, (joined, _) in inside.items():              # the joined tensor is born with its first part
            lifetime[joined] = (min(lifetime[joined][0], t - 1), lifetime[joined][1])
        taken: list[tuple[int, int, int, int]] = []             # (first word, end word, born, dies)
        placed = {}
        for t in lifetime:
            placement, words = regions[t]
            born, dies = lifetime[t]
            align = 1 if placement.packed_lanes else placement.words_per_pixel
            start = 0
            for first, last, other_born, other_dies in sorted(taken):
                if other_dies < born or dies < other_born or last <= start:
                    continue
                if start + words <= first:
                    break
                start = _ceil_div(last, align) * align
            taken.append((start, start + words, born, dies))
            placed[t] = dataclasses.replace(placement, base=placement.base + start)
        for t, (joined, offset) in inside.items():
            placed[t] = self.channel_view(placed[joined], offset, self.model.shapes[t][0])
        return placed

    def channel_view(self, tensor: TensorPlacement, offset: int, channels: int) -> TensorPlacement:
        """Channels ``offset`` to ``offset + channels`` of an unpacked ``tensor`` (``offset``
        a multiple of the bank width): its pixel stride, from the word of ``offset`` on."""
        return dataclasses.replace(tensor, base=tensor.base + offset // self.config.bank_width, channels=channels)

    def written_in_place(self) -> dict[int, tuple[int, int]]:
        """``{tensor: (joined tensor, channel offset)}`` for each input of a concatenation
        that its producer writes straight into its channels of the joined tensor: a Conv2d,
        Linear or add read by that concatenation alone, at its scale and zero point, whose
        channels start a word. The concatenation copies its other inputs."""
        inside = {}
        for index, (layer, reads) in enumerate(zip(self.model.layers, self.model.layer_inputs)):
            if not isinstance(layer, ConcatLayer):
                continue
            offsets = np.cumsum([0] + [self.model.shapes[t][0] for t in reads[:-1]])
            for t, q, offset in zip(reads, layer.input_quants, offsets):
                producer = self.model.layers[t - 1] if t else None
                if (isinstance(producer, (Conv2dLayer, DenseLayer, AddLayer)) and self.consumers(t) == [index]
                        and reads.count(t) == 1 and q == layer.output_quant
                        and offset % self.config.bank_width == 0):
                    inside[t] = (index + 1, int(offset))
        return inside

    def region(self, t: int) -> tuple[TensorPlacement, int]:
        """Tensor ``t`` placed from word 0, and the words its region takes. It is packed
        when all its consumers fold and its producer can write it packed: the loader (the
        model's input), a GEMM op, or a max-pool of more than one tap (two writes per
        output word)."""
        layers, shape = self.model.layers, self.model.shapes[t]
        if t == 0 and self.stacking:
            shape = self.stacking.stacked_shape(shape)
        placement = self.placement(shape, 0)
        if t in self.planar:
            return dataclasses.replace(placement, planar=True), placement.words
        consumers = [layers[index] for index in self.consumers(t)]
        producer = layers[t - 1] if t else None
        writes_packed = (producer is None or isinstance(producer, (Conv2dLayer, DenseLayer, AddLayer))
                         or (isinstance(producer, MaxPool2dLayer) and math.prod(producer.kernel_size) > 1))
        stacked = t == 0 and self.stacking is not None
        if not consumers or not writes_packed or not all(self.folds(c, shape, stacked) for c in consumers):
            return placement, placement.words
        guards = [self.fold_guards(consumer, shape[0]) for consumer in consumers]
        before, after = max(g[0] for g in guards), max(g[1] for g in guards)
        placement = dataclasses.replace(placement, base=before, packed_lanes=self.config.bank_width)
        return placement, before + placement.words + after

    @staticmethod
    def pool(layer: MaxPool2dLayer, source: TensorPlacement, dest: TensorPlacement) -> PoolOp:
        """A pool op reading as much at once as its writes leave time for (see :class:`PoolOp`)."""
        (kh, kw), wpp = layer.kernel_size, source.words_per_pixel
        written = wpp + (1 if dest.packed_lanes else 0)        # words one output pixel's writes touch
        if kw > 1 and layer.padding[1] == 0 and kw * wpp <= READ_WORDS and written <= kh:
            words, taps = wpp, kw
        else:
            words, taps = max(1, min(wpp, READ_WORDS, kh * kw - (1 if dest.packed_lanes else 0))), 1
        return PoolOp(layer.name, source, dest, tuple(layer.kernel_size), tuple(layer.stride),
                      tuple(layer.padding), words, taps)

    def folds(self, layer, shape, stacked: bool = False) -> bool:
        """Whether ``layer``, reading a tensor of ``shape``, runs folded (saves tiles);
        ``stacked``: the layer as it runs on a row-stacked input (kernel height 1). A dense
        layer after a flatten is a convolution whose kernel is the whole ``(C, H, W)`` input."""
        if isinstance(layer, DenseLayer) and len(shape) == 3:
            kh, kw = shape[1:]
        elif not isinstance(layer, Conv2dLayer) or self.runs_diagonal(layer):
            return False
        else:
            kh, kw = (1, layer.weight.shape[3]) if stacked else layer.weight.shape[2:]
        return self.k_tiles(kh, kw, shape[0], folded=True) < self.k_tiles(kh, kw, shape[0], folded=False)

    def k_tiles(self, kh: int, kw: int, c_in: int, folded: bool) -> int:
        rows = self.config.rows
        return kh * (_ceil_div(kw * c_in, rows) if folded else kw * _ceil_div(c_in, rows))

    def row_stacking(self, layer, shape) -> RowStacking | None:
        """How to stack the input's rows for the first ``layer`` (see the module
        docstring), or None where that does not save cycles: the tiles saved on every
        output pixel against the longer input load (about ``READ_WORDS`` words a cycle)."""
        if not isinstance(layer, Conv2dLayer) or layer.weight.shape[2] == 1:
            return None
        if self.runs_diagonal(layer):
            return None
        cfg = self.config
        c, h, w = shape
        kh, kw = layer.weight.shape[2:]
        stacking = RowStacking(kh, layer.stride[0], layer.padding[0], layer.input_quant.zero_point)
        stacked_c, h_out, _ = stacking.stacked_shape(shape)
        w_out = (w + 2 * layer.padding[1] - kw) // layer.stride[1] + 1
        before = min(self.k_tiles(kh, kw, c, folded) for folded in (False, True))
        after = min(self.k_tiles(1, kw, stacked_c, folded) for folded in (False, True))
        saved = (before - after) * h_out * w_out * _ceil_div(layer.out_features, cfg.cols) * self.batch
        load_words = min(READ_WORDS, cfg.input_values_per_beat // cfg.bank_width)
        longer_load = _ceil_div((stacked_c * h_out - c * h) * w * self.batch, cfg.bank_width * load_words)
        return stacking if saved > longer_load else None

    def fold_guards(self, layer, c_in: int) -> tuple[int, int]:
        """Words kept free before and after a packed tensor: a folded window reaches
        ``pad_w`` pixels left of a row, and a tile ``rows`` elements (two words) on."""
        bank, pad_w = self.config.bank_width, layer.padding[1] if isinstance(layer, Conv2dLayer) else 0
        return _ceil_div(pad_w * c_in, bank) + 1, _ceil_div(pad_w * c_in + self.config.rows, bank) + 2

    def split_factors(self) -> list[int]:
        """The splits the array allows: ``S`` dividing ``cols`` whose ``rows * S`` inputs a
        step reads are whole words, at most :data:`READ_WORDS` of them."""
        cfg = self.config
        return [s for s in range(2, cfg.cols + 1)
                if cfg.cols % s == 0 and cfg.rows * s % cfg.bank_width == 0
                and cfg.rows * s <= READ_WORDS * cfg.bank_width]

    def split_steps(self, c_in: int, n_out: int, split: int) -> int:
        """Steps of one output pixel of a 1x1 layer split over ``split`` columns."""
        cfg = self.config
        return _ceil_div(n_out * split, cfg.cols) * _ceil_div(c_in, cfg.rows * split)

    def best_split(self, c_in: int, n_out: int) -> int:
        """The split of a 1x1 layer with the fewest steps (the smallest among equals; 1: none)."""
        return min([1] + self.split_factors(), key=lambda s: (self.split_steps(c_in, n_out, s), s))

    @staticmethod
    def splittable(layer, shape) -> bool:
        """Whether ``layer`` reading a tensor of ``shape`` is a 1x1 layer a split op can run:
        a dense layer on a vector, or a 1x1 convolution of stride 1 without padding or groups."""
        if isinstance(layer, DenseLayer):
            return len(shape) == 1
        return (isinstance(layer, Conv2dLayer) and layer.groups == 1 and tuple(layer.weight.shape[2:]) == (1, 1)
                and tuple(layer.stride) == (1, 1) and tuple(layer.padding) == (0, 0))

    def split_steps_saved(self) -> int:
        """The steps that splitting the model's 1x1 layers saves."""
        model, saved = self.model, 0
        for index, (layer, reads) in enumerate(zip(model.layers, model.layer_inputs)):
            source = reads[0] if reads else 0
            if (self.stored(source) == source and self.splittable(layer, model.shapes[source])
                    and not self.runs_taps_on_rows(index)):
                n_out, c_in = layer.weight.shape[:2]
                pixels = math.prod(model.shapes[index + 1][1:]) * self.batch
                best = self.best_split(c_in, n_out)
                saved += (self.split_steps(c_in, n_out, 1) - self.split_steps(c_in, n_out, best)) * pixels
        return saved

    def gemm(self, layer, source: TensorPlacement, dest: TensorPlacement, after_flatten: bool) -> GemmOp:
        shape = (source.channels,) if source.height == source.width == 1 and isinstance(layer, DenseLayer) \
            else (source.channels, source.height, source.width)
        if (self.splitting and not after_flatten and self.splittable(layer, shape) and not source.packed_lanes
                and not source.planar and not dest.planar and not dest.packed_lanes
                and not (self.stacking and not self.ops)):
            split = self.best_split(source.channels, layer.out_features)
            if split > 1:
                return self.split_op(layer, source, dest, split)
        if isinstance(layer, DenseLayer):
            if after_flatten:
                # Flatten ordered features as (C, H, W): view the weights as a full-image kernel.
                kernel = layer.weight.reshape(layer.out_features, source.channels, source.height, source.width)
            else:
                kernel = layer.weight.reshape(layer.out_features, -1, 1, 1)
            stride, padding = (1, 1), (0, 0)
        else:
            kernel = layer.weight
            if layer.groups != 1:
                kernel = self.expand_groups(layer)
            stride, padding = tuple(layer.stride), tuple(layer.padding)
            if self.stacking and not self.ops:
                # The first layer on its row-stacked input (the model's first layer is this one).
                kernel = self.stacking.stack_kernel(kernel)
                stride, padding = (1, stride[1]), (0, padding[1])
        zp_in = layer.input_quant.zero_point
        kernel = kernel.astype(np.int64)
        bias_eff = _fold_zero_point(layer.bias, zp_in, kernel)
        macs = dest.pixels * layer.out_features * layer.fan_in
        return self.gemm_op(layer.name, kernel, bias_eff, layer.requant, zp_in, stride, padding, source, dest,
                            layer.weight_bits, macs)

    def split_op(self, layer, source: TensorPlacement, dest: TensorPlacement, split: int) -> GemmOp:
        """A 1x1 layer as a split op (see the module docstring)."""
        cfg = self.config
        rows, cols = cfg.rows, cfg.cols
        kernel = layer.weight.reshape(layer.out_features, -1).astype(np.int64)       # [N, C]
        n_out, c_in = kernel.shape
        per_tile, span = cols // split, rows * split
        nt_count, k_tiles = _ceil_div(n_out, per_tile), _ceil_div(c_in, span)
        padded = np.zeros((nt_count * per_tile, k_tiles * span), dtype=np.int64)
        padded[:n_out, :c_in] = kernel
        tiles = []
        for nt in range(nt_count):
            for kt in range(k_tiles):
                # [per_tile, rows, split] -> PE (r, c = o * split + s): w[o, (kt * rows + r) * split + s]
                block = padded[nt * per_tile:(nt + 1) * per_tile, kt * span:(kt + 1) * span]
                tiles.append(block.reshape(per_tile, rows, split).transpose(1, 0, 2).reshape(rows, cols))
        zp_in = layer.input_quant.zero_point
        bias_eff = _fold_zero_point(layer.bias, zp_in, kernel)
        weight_base, param_base, need = self.emit(layer.name, tiles, kernel, bias_eff, layer.requant,
                                                  layer.weight_bits, split)
        return GemmOp(layer.name, source, dest, (1, 1), (1, 1), (0, 0), k_tiles, nt_count,
                      min(dest.pixels, cfg.accumulator_depth), weight_base, param_base, zp_in,
                      dest.pixels * n_out * c_in, need, 0, layer.weight_bits, split=split)

    def add(self, layer: AddLayer, a: TensorPlacement, b: TensorPlacement, dest: TensorPlacement) -> GemmOp:
        """A residual add as a convolution of a 2x1 kernel over a view of both inputs.

        With ``lower`` the input at the lower address and ``D`` the pixels from it to the
        other, the view is a tensor of 2 rows of ``D`` pixels whose row 0 starts with
        ``lower`` and row 1 with the other input; output pixel ``p`` (the batch's pixels in
        one row) reads pixel ``p`` of both rows. Each channel weighs its two taps by the
        inputs' weights, and the bias holds the zero points: ``-(w_a * za + w_b * zb)``.
        """
        if a.base == b.base:
            raise ValueError(f"{layer.name}: adds a tensor to itself, which is not supported; scale it instead")
        if a.packed_lanes or b.packed_lanes or a.words_per_pixel != b.words_per_pixel:
            raise AssertionError(f"{layer.name}: an add's inputs must be unpacked tensors of one layout")
        taps = sorted(zip((a, b), layer.weights, layer.input_quants), key=lambda tap: tap[0].base)
        (lower, w_low, q_low), (upper, w_high, q_high) = taps
        wpp = lower.words_per_pixel
        gap, rest = divmod(upper.base - lower.base, wpp)
        if rest or gap < lower.pixels:
            raise AssertionError(f"{layer.name}: inputs {gap} pixels (+{rest} words) apart")
        channels = lower.channels
        weights = np.tile(np.array([w_low, w_high], dtype=np.int64).reshape(1, 2, 1), (channels, 1, 1))
        bias = np.full(channels, -(w_low * q_low.zero_point + w_high * q_high.zero_point), dtype=np.int64)
        view = TensorPlacement(lower.base, channels, 2, gap, wpp)
        row = dataclasses.replace(dest, height=1, width=dest.pixels, images=1)
        return self.channelwise(layer.name, weights, bias, layer.requant, q_low.zero_point, (1, 1), (0, 0), view,
                                row, sem.WEIGHT_BITS)

    def concat(self, layer: ConcatLayer, reads, sources: list[TensorPlacement], dest: TensorPlacement) -> list[GemmOp]:
        """The copies of a concatenation: each input its producer did not write in place
        (see :meth:`written_in_place`) is requantized into its channels by a channel-wise
        op of unit weights."""
        bank, inside = self.config.bank_width, self.inside
        if any(self.stored(t) != t for t in reads):
            raise ValueError(f"{layer.name}: joins a flattened tensor, which is not supported; join before "
                             f"flattening")
        offsets = np.cumsum([0] + [source.channels for source in sources[:-1]])
        if any(offset % bank for offset in offsets):
            raise ValueError(f"{layer.name}: joins tensors of {', '.join(str(s.channels) for s in sources)} "
                             f"channels; on a {self.config.rows}x{self.config.cols} array every input but the "
                             f"last needs a multiple of {bank} channels (each input's channels start a word of "
                             f"the activation memory)")
        ops = []
        for number, (t, source, q, rq, offset) in enumerate(zip(reads, sources, layer.input_quants, layer.requants,
                                                                offsets)):
            if t in inside:
                continue
            channels = source.channels
            weights = np.ones((channels, 1, 1), dtype=np.int64)
            bias = np.full(channels, -q.zero_point, dtype=np.int64)
            ops.append(self.channelwise(f"{layer.name}.{number}", weights, bias, rq, q.zero_point, (1, 1), (0, 0),
                                        source, self.channel_view(dest, int(offset), channels), sem.WEIGHT_BITS))
        return ops

    def depthwise(self, layer: Conv2dLayer, source: TensorPlacement, dest: TensorPlacement) -> GemmOp:
        """A depthwise convolution (one filter per channel) as a channel-wise op."""
        zp_in = layer.input_quant.zero_point
        weights = layer.weight[:, 0].astype(np.int64)                       # [C, kh, kw]
        bias = _fold_zero_point(layer.bias, zp_in, weights)
        return self.channelwise(layer.name, weights, bias, layer.requant, zp_in, tuple(layer.stride),
                                tuple(layer.padding), source, dest, layer.weight_bits)

    def depthwise_taps_on_rows(self, layer: Conv2dLayer, source: TensorPlacement, dest: TensorPlacement) -> GemmOp:
        """A depthwise convolution as a taps-on-rows op (see the module docstring): weight
        tile ``(nt, k)`` holds ``w[nt * cols + c, tap k * rows + r]`` at PE ``(r, c)``, taps
        in raster order ``i * kw + j``."""
        cfg = self.config
        rows, cols = cfg.rows, cfg.cols
        zp_in = layer.input_quant.zero_point
        weights = layer.weight[:, 0].astype(np.int64)                       # [C, kh, kw]
        channels, kh, kw = weights.shape
        tap_tiles, nt_count = _ceil_div(kh * kw, rows), _ceil_div(channels, cols)
        taps = np.zeros((nt_count * cols, tap_tiles * rows), dtype=np.int64)
        taps[:channels, :kh * kw] = weights.reshape(channels, -1)
        tiles = [taps[nt * cols:(nt + 1) * cols, k * rows:(k + 1) * rows].T
                 for nt in range(nt_count) for k in range(tap_tiles)]
        bias = _fold_zero_point(layer.bias, zp_in, weights)
        weight_base, param_base, need = self.emit(layer.name, tiles, weights[:, None], bias, layer.requant,
                                                  layer.weight_bits)
        return GemmOp(layer.name, source, dest, (kh, kw), tuple(layer.stride), tuple(layer.padding), 1, nt_count,
                      1, weight_base, param_base, zp_in, dest.pixels * channels * kh * kw, need, 0,
                      layer.weight_bits, False, tap_tiles)

    @staticmethod
    def is_depthwise(layer) -> bool:
        """A convolution whose output channel ``c`` reads only input channel ``c``."""
        return (isinstance(layer, Conv2dLayer) and layer.groups > 1
                and layer.groups == layer.out_features == layer.weight.shape[1] * layer.groups)

    def runs_diagonal(self, layer) -> bool:
        """Whether ``layer`` is a depthwise convolution that runs as a diagonal op."""
        return self.is_depthwise(layer) and self.diagonal_fits(layer.out_features)

    def diagonal_fits(self, channels: int) -> bool:
        """Whether a channel-wise layer of ``channels`` runs as a diagonal op (see
        :meth:`channelwise`): where it has more than ``cols`` channels and each tile of
        ``cols`` output channels is one word of the activation memory (``rows`` divides
        ``cols``)."""
        return self.config.cols % self.config.rows == 0 and channels > self.config.cols

    def channelwise(self, name: str, weights: np.ndarray, bias_eff: np.ndarray, rq, zp_in: int, stride, padding,
                    source: TensorPlacement, dest: TensorPlacement, weight_bits: int) -> GemmOp:
        """The op of a layer whose output channel ``c`` reads only input channel ``c``,
        through the kernel ``weights[c]`` (``[C, kh, kw]``).

        On the array such a layer is a convolution of block-diagonal weights: of the
        ``ceil(C / rows) x ceil(C / cols)`` weight tiles of a tap, only those on the
        diagonal hold weights. Where :meth:`diagonal_fits`, it runs as a *diagonal* op
        instead: output tile ``nt`` (channels ``nt * cols`` on, one word of each pixel)
        reads only the input channel tiles of its own word, so its kernel is
        ``[C, cols, kh, kw]`` with channel ``c`` at relative input channel ``c % cols``:
        ``ceil(C / cols)`` times fewer steps."""
        channels = len(weights)
        if self.diagonal_fits(channels) and not source.packed_lanes and not dest.packed_lanes:
            cols = self.config.cols
            kernel = np.zeros((channels, cols) + weights.shape[1:], dtype=np.int64)
            kernel[np.arange(channels), np.arange(channels) % cols] = weights
            diagonal = True
        else:
            kernel = np.zeros((channels, channels) + weights.shape[1:], dtype=np.int64)
            kernel[np.arange(channels), np.arange(channels)] = weights
            diagonal = False
        return self.gemm_op(name, kernel, bias_eff, rq, zp_in, stride, padding, source, dest, weight_bits,
                            dest.pixels * channels * weights[0].size, diagonal)

    def gemm_op(self, name: str, kernel: np.ndarray, bias_eff: np.ndarray, rq, zp_in: int, stride, padding,
                source: TensorPlacement, dest: TensorPlacement, weight_bits: int, macs: int,
                diagonal: bool = False) -> GemmOp:
        """The op of a convolution ``kernel`` ``[N, C, kh, kw]`` (int64) with the input zero
        point folded into ``bias_eff``; its weight tiles and parameters join the images.
        A one-channel ``rq`` serves every output channel."""
        cfg = self.config
        rows, cols = cfg.rows, cfg.cols
        n_out, c_in, kh, kw = kernel.shape
        ct_count, nt_count = _ceil_div(c_in, rows), _ceil_div(n_out, cols)
        tiles = []
        padded = np.zeros((nt_count * cols, ct_count * rows, kh, kw), dtype=np.int64)
        padded[:n_out, :c_in] = kernel
        row_tiles = _ceil_div(kw * c_in, rows) if source.packed_lanes else 0
        if row_tiles:
            # Kernel row i as kw * C consecutive elements (tap-major), in tiles of rows.
            rowwise = np.zeros((nt_count * cols, kh, row_tiles * rows), dtype=np.int64)
            rowwise[:n_out, :, :kw * c_in] = kernel.transpose(0, 2, 3, 1).reshape(n_out, kh, kw * c_in)
            for nt in range(nt_count):
                for i in range(kh):
                    for t in range(row_tiles):
                        tiles.append(rowwise[nt * cols:(nt + 1) * cols, i, t * rows:(t + 1) * rows].T)
        else:
            for nt in range(nt_count):
                for i in range(kh):
                    for j in range(kw):
                        for ct in range(ct_count):
                            tile = padded[nt * cols:(nt + 1) * cols, ct * rows:(ct + 1) * rows, i, j]
                            tiles.append(tile.T)                          # [rows, cols]
        weight_base, param_base, need = self.emit(name, tiles, kernel, bias_eff, rq, weight_bits)
        pixels = dest.pixels
        return GemmOp(name, source, dest, (kh, kw), stride, padding, ct_count, nt_count,
                      min(pixels, cfg.accumulator_depth), weight_base, param_base, zp_in, macs, need,
                      row_tiles, weight_bits, diagonal)

    def emit(self, name: str, tiles: list[np.ndarray], kernel: np.ndarray, bias_eff: np.ndarray, rq,
             weight_bits: int, split: int = 1) -> tuple[int, int, int]:
        """Add an op's weight ``tiles`` (``[rows, cols]`` each) and its parameters (one word
        per tile of ``cols / split`` output channels of ``kernel``, ``[N, C, kh, kw]``) to the
        images; returns its weight base, parameter base and accumulator bits needed. The
        biases are per column (a split op's first column of each group holds its output's),
        the requantization parameters per output of the tile."""
        cols, n_out = self.config.cols, len(kernel)
        per_tile = cols // split
        weight_base = weight_packing.tile_address(sum(len(w) for w in self.words), weight_bits)
        self.words.append(weight_packing.pack_tiles(np.array(tiles), weight_bits))
        need = self.check_accumulator(name, kernel, bias_eff)
        multiplier, shift = (np.broadcast_to(v, (n_out,)) for v in (rq.multiplier, rq.shift))
        param_base = len(self.params)
        for nt in range(_ceil_div(n_out, per_tile)):
            columns = [nt * per_tile + c // split if c % split == 0 else n_out for c in range(cols)]
            lanes = [nt * per_tile + g if g < per_tile else n_out for g in range(cols)]
            self.params.append((
                [int(bias_eff[n]) if n < n_out else 0 for n in columns],
                [int(multiplier[n]) if n < n_out else 0 for n in lanes],
                [int(shift[n]) if n < n_out else 1 for n in lanes],
                rq.zero_point, rq.clamp_min, rq.clamp_max))
        return weight_base, param_base, need

    def check_accumulator(self, name: str, kernel: np.ndarray, bias: np.ndarray):
        """Prove that no int8 input overflows the accumulators. The hardware adds raw codes
        times weights to the bias with the input zero point folded in, in the array and in
        the accumulator memory; :func:`sem.accumulator_range` bounds every such sum."""
        low, high = sem.accumulator_range(kernel, bias, sem.ACTIVATION_MIN, sem.ACTIVATION_MAX)
        need, have = sem.signed_bits(low, high), self.config.accumulator_bits
        if need > have:
            raise ValueError(f"{name}: its sums reach [{low}, {high}] for some int8 input (weights, bias and "
                             f"input zero point of this layer), which needs {need} accumulator bits; "
                             f"the configuration has {have}")
        return need

    @staticmethod
    def expand_groups(layer: Conv2dLayer) -> np.ndarray:
        """A grouped convolution as a dense one with block-diagonal weights."""
        n_out, c_per_group, kh, kw = layer.weight.shape
        groups = layer.groups
        n_per_group = n_out // groups
        dense = np.zeros((n_out, c_per_group * groups, kh, kw), dtype=np.int8)
        for n in range(n_out):
            g = n // n_per_group
            dense[n, g * c_per_group:(g + 1) * c_per_group] = layer.weight[n]
        return dense


def lower(model: QuantizedModel, config: AcceleratorConfig, batch: int = 1, *,
          stack_input_rows: bool = True, depthwise_taps_on_rows: bool = True,
          split_reductions: str = "auto") -> Program:
    """Compile ``model`` for ``config``, ``batch`` inputs per inference; raises
    ``ValueError`` naming the layer that cannot fit. ``stack_input_rows=False`` never
    stacks the input's rows (see the module docstring), which the lowering otherwise does
    where that saves cycles; ``depthwise_taps_on_rows=False`` runs no depthwise
    convolution taps-on-rows (they run as channel-wise ops). ``split_reductions`` splits the
    reductions of 1x1 layers over columns (see the module docstring): ``"auto"`` where that
    pays, ``"always"`` wherever a split has fewer steps, ``"never"`` nowhere."""
    if not isinstance(model, QuantizedModel):
        raise TypeError(f"model must be a QuantizedModel, not {type(model).__name__}")
    if not isinstance(config, AcceleratorConfig):
        raise TypeError(f"config must be an AcceleratorConfig, not {type(config).__name__}")
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise ValueError(f"batch must be a positive integer, not {batch!r}")
    if split_reductions not in ("auto", "always", "never"):
        raise ValueError(f"split_reductions must be 'auto', 'always' or 'never', not {split_reductions!r}")
    def lowered(split: bool) -> _Lowering:
        return _Lowering(model, config, batch, stack_input_rows, depthwise_taps_on_rows, split_reductions=split)
    if split_reductions != "auto":
        return lowered(split_reductions == "always").run()
    whole = lowered(False)
    program = whole.run()
    if not whole.split_steps_saved():
        return program
    split = lowered(True).run()
    return split if _split_pays(program, split) else program


#: The share of a program's steps that splitting reductions must save (net of the adding
#: stage's cycle on every GEMM op) to be worth the stage's registers.
SPLIT_MIN_SAVING = 0.01


def _split_pays(whole: Program, split: Program) -> bool:
    """Whether ``split`` (the program with its 1x1 layers split) takes enough fewer cycles
    than ``whole`` (see :data:`SPLIT_MIN_SAVING`)."""
    def steps(program):
        return sum(op.steps for op in program.ops)
    return steps(split) + len(split.gemm_ops) <= (1 - SPLIT_MIN_SAVING) * steps(whole)
