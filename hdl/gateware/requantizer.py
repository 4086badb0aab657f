"""Post-processing of finished accumulators: requantize, add the zero point, clamp.

Implements ``requantize_half_up`` of :mod:`pytorch_ref.ir.integer_semantics`, lane by lane::

    y = clamp(((acc * multiplier) + 2**(shift-1)) >> shift) + zero_point, clamp_min, clamp_max)

with the exact 64-bit product and an arithmetic shift (round half towards +infinity).
ReLU is the clamp's lower bound.
"""
from amaranth import Const, Module, Signal, Value, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.config import REQUANTIZER_MULTIPLIERS
from hdl.gateware.pipeline import delay_line
from hdl.gateware.shift_add import pipelined_shift_add_product
from pytorch_ref.ir import integer_semantics as sem

MULTIPLIER_BITS = sem.MULTIPLIER_BITS             # signed; values in [2**30, 2**31)
SHIFT_BITS = sem.SHIFT_MAX.bit_length()           # unsigned; shifts up to SHIFT_MAX


def requant_params_layout(lanes: int, data_bits: int) -> data.StructLayout:
    code = signed(data_bits)
    return data.StructLayout({
        "multiplier": data.ArrayLayout(signed(MULTIPLIER_BITS), lanes),
        "shift": data.ArrayLayout(unsigned(SHIFT_BITS), lanes),
        "zero_point": code, "clamp_min": code, "clamp_max": code,
    })


#: Operand chunks that one signed 18x18 DSP multiplier takes: 17 bits unsigned, or 18 signed.
CHUNK_BITS = 17


def _chunks(value, width: int) -> list[tuple[object, int]]:
    """``value`` (``width`` bits, signed) as ``(chunk, offset)`` pairs: unsigned chunks of
    :data:`CHUNK_BITS` from the bottom, the top one signed and at most one bit wider."""
    chunks, offset = [], 0
    while width - offset > CHUNK_BITS + 1:
        chunks.append((value[offset:offset + CHUNK_BITS], offset))
        offset += CHUNK_BITS
    chunks.append((value[offset:width].as_signed(), offset))
    return chunks


class Requantizer(wiring.Component):
    """``lanes`` int32 accumulators in, ``lanes`` int8 codes out, :attr:`LATENCY` cycles later.

    Six pipeline stages, each short enough for the clock: three for the exact product,
    then the rounding constant, the arithmetic shift, then zero point and clamp. The
    product takes ``multipliers``: ``"logic"``, an adder tree of the accumulator shifted
    by the multiplier's set bits, cut in three; or ``"dsp"``, the partial products of
    17-bit chunks of both (one DSP multiplier each), their sums by accumulator chunk,
    then their sum.

    Members
    -------
    i_valid, i_acc, i_params, i_tag: In. ``i_params`` must be valid in the same cycle as
    ``i_acc``. ``i_tag`` is carried alongside (e.g. the destination address).
    o_valid, o_data, o_tag: Out, registered.
    """
    LATENCY = 6

    def __init__(self, lanes: int, accumulator_bits: int, data_bits: int, tag_layout,
                 multipliers: str = "dsp"):
        if multipliers not in REQUANTIZER_MULTIPLIERS:
            raise ValueError(f"requantizer multipliers must be one of {REQUANTIZER_MULTIPLIERS}, not {multipliers!r}")
        self._lanes, self._acc_bits, self._multipliers = lanes, accumulator_bits, multipliers
        super().__init__({
            "i_valid": In(1),
            "i_acc": In(data.ArrayLayout(signed(accumulator_bits), lanes)),
            "i_params": In(requant_params_layout(lanes, data_bits)),
            "i_tag": In(tag_layout),
            "o_valid": Out(1),
            "o_data": Out(data.ArrayLayout(signed(data_bits), lanes)),
            "o_tag": Out(tag_layout),
        })

    def elaborate(self, platform):
        m = Module()
        product_bits = self._acc_bits + MULTIPLIER_BITS
        rounding_bits = max(product_bits - 1, sem.SHIFT_MAX)
        valid = delay_line(m, self.i_valid, self.LATENCY, "valid")
        tag = delay_line(m, self.i_tag, self.LATENCY, "tag")
        m.d.comb += [self.o_valid.eq(valid[-1]), self.o_tag.eq(tag[-1])]
        p = self.i_params
        zero_point = delay_line(m, p.zero_point, self.LATENCY - 1, "zero_point")[-1]
        clamp_min = delay_line(m, p.clamp_min, self.LATENCY - 1, "clamp_min")[-1]
        clamp_max = delay_line(m, p.clamp_max, self.LATENCY - 1, "clamp_max")[-1]
        for lane in range(self._lanes):
            shift = delay_line(m, p.shift[lane], 4, f"shift{lane}")
            # 1-3: the exact product.
            if self._multipliers == "dsp":
                product = self._dsp_product(m, lane, product_bits)
            else:
                # The multiplier is never negative (the semantics' range): its low bits suffice.
                product = pipelined_shift_add_product(
                    m, self.i_acc[lane], Value.cast(p.multiplier[lane])[:MULTIPLIER_BITS - 1], product_bits,
                    stages=3, name=f"product{lane}")
            # 4: add 2**(shift-1), so that the shift rounds half up. (Wide enough for the
            # largest shift even when the product is narrower: a narrow accumulator.)
            rounding = Signal(unsigned(rounding_bits), name=f"half{lane}")
            m.d.comb += rounding.eq(Const(1, rounding_bits) << (shift[3] - 1)[:SHIFT_BITS])
            biased = Signal(signed(max(product_bits, rounding_bits) + 1), name=f"biased{lane}")
            m.d.sync += biased.eq(product + rounding)
            # 5: arithmetic shift.
            rounded = Signal(signed(product_bits), name=f"rounded{lane}")
            m.d.sync += rounded.eq(biased >> shift[4])
            # 6: zero point and clamp (ReLU is the lower bound).
            with_zp = Signal(signed(product_bits + 1), name=f"with_zp{lane}")
            m.d.comb += with_zp.eq(rounded + zero_point)
            out = self.o_data[lane]
            with m.If(with_zp < clamp_min):
                m.d.sync += out.eq(clamp_min)
            with m.Elif(with_zp > clamp_max):
                m.d.sync += out.eq(clamp_max)
            with m.Else():
                m.d.sync += out.eq(with_zp)
        return m

    def _dsp_product(self, m, lane: int, product_bits: int):
        """Stages 1-3 on DSP multipliers: the partial products of 17-bit chunks of the
        accumulator and the multiplier (one DSP each, its result registered), their sums by
        accumulator chunk, then the exact product."""
        acc_chunks = _chunks(Value.cast(self.i_acc[lane]), self._acc_bits)
        mult_chunks = _chunks(Value.cast(self.i_params.multiplier[lane]), MULTIPLIER_BITS)
        partial = []
        for a, (acc_chunk, acc_at) in enumerate(acc_chunks):
            row = []
            for b, (mult_chunk, mult_at) in enumerate(mult_chunks):
                reg = Signal(signed(len(acc_chunk) + len(mult_chunk) + 1), name=f"partial{lane}_{a}_{b}")
                m.d.sync += reg.eq(acc_chunk * mult_chunk)
                row.append((reg, mult_at))
            partial.append((row, acc_at))
        sums = []
        for a, (row, acc_at) in enumerate(partial):
            total = Signal(signed(product_bits + 1), name=f"sum{lane}_{a}")
            m.d.sync += total.eq(sum(reg << at for reg, at in row))
            sums.append((total, acc_at))
        product = Signal(signed(product_bits), name=f"product{lane}")
        m.d.sync += product.eq(sum(total << at for total, at in sums))
        return product
