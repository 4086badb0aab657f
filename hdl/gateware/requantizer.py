"""Post-processing of finished accumulators: requantize, add the zero point, clamp.

Implements ``requantize_half_up`` of :mod:`pytorch_ref.ir.integer_semantics`, lane by lane::

    y = clamp(((acc * multiplier) + 2**(shift-1)) >> shift) + zero_point, clamp_min, clamp_max)

with the exact 64-bit product and an arithmetic shift (round half towards +infinity).
ReLU is the clamp's lower bound.
"""
from amaranth import Const, Module, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.gateware.pipeline import delay_line
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


class Requantizer(wiring.Component):
    """``lanes`` int32 accumulators in, ``lanes`` int8 codes out, :attr:`LATENCY` cycles later.

    Five pipeline stages, each short enough for the clock: two half products
    (``acc x multiplier[15:0]`` and ``acc x multiplier[31:16]``, one DSP pair each), their
    sum, the rounding constant, the arithmetic shift, then zero point and clamp.

    Members
    -------
    i_valid, i_acc, i_params, i_tag: In. ``i_params`` must be valid in the same cycle as
    ``i_acc``. ``i_tag`` is carried alongside (e.g. the destination address).
    o_valid, o_data, o_tag: Out, registered.
    """
    LATENCY = 5

    def __init__(self, lanes: int, accumulator_bits: int, data_bits: int, tag_layout):
        self._lanes, self._acc_bits = lanes, accumulator_bits
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
        half_bits = MULTIPLIER_BITS // 2
        product_bits = self._acc_bits + MULTIPLIER_BITS
        valid = delay_line(m, self.i_valid, self.LATENCY, "valid")
        tag = delay_line(m, self.i_tag, self.LATENCY, "tag")
        m.d.comb += [self.o_valid.eq(valid[-1]), self.o_tag.eq(tag[-1])]
        p = self.i_params
        zero_point = delay_line(m, p.zero_point, self.LATENCY - 1, "zero_point")[-1]
        clamp_min = delay_line(m, p.clamp_min, self.LATENCY - 1, "clamp_min")[-1]
        clamp_max = delay_line(m, p.clamp_max, self.LATENCY - 1, "clamp_max")[-1]
        for lane in range(self._lanes):
            shift = delay_line(m, p.shift[lane], 3, f"shift{lane}")
            multiplier = p.multiplier[lane].as_unsigned()
            # 1: half products.
            low = Signal(signed(self._acc_bits + half_bits + 1), name=f"low{lane}")
            high = Signal(signed(self._acc_bits + half_bits), name=f"high{lane}")
            m.d.sync += [low.eq(self.i_acc[lane] * multiplier[:half_bits]),
                         high.eq(self.i_acc[lane] * multiplier[half_bits:].as_signed())]
            # 2: the exact product.
            product = Signal(signed(product_bits), name=f"product{lane}")
            m.d.sync += product.eq((high << half_bits) + low)
            # 3: add 2**(shift-1), so that the shift rounds half up.
            rounding = Signal(unsigned(product_bits - 1), name=f"half{lane}")
            m.d.comb += rounding.eq(Const(1, product_bits - 1) << (shift[2] - 1)[:SHIFT_BITS])
            biased = Signal(signed(product_bits + 1), name=f"biased{lane}")
            m.d.sync += biased.eq(product + rounding)
            # 4: arithmetic shift.
            rounded = Signal(signed(product_bits), name=f"rounded{lane}")
            m.d.sync += rounded.eq(biased >> shift[3])
            # 5: zero point and clamp (ReLU is the lower bound).
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
