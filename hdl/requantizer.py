"""Post-processing of finished accumulators: requantize, add the zero point, clamp.

Implements ``requantize_half_up`` of :mod:`pytorch_ref.integer_semantics`, lane by lane::

    y = clamp(((acc * multiplier) + 2**(shift-1)) >> shift) + zero_point, clamp_min, clamp_max)

with the exact 64-bit product and an arithmetic shift (round half towards +infinity).
ReLU is the clamp's lower bound. Three pipeline stages: product, rounding shift, clamp.
"""
from amaranth import Const, Module, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

SHIFT_BITS = 6          # shifts up to 62, see integer_semantics.SHIFT_MAX
MULTIPLIER_BITS = 32    # signed; values in [2**30, 2**31)


def requant_params_layout(lanes: int) -> data.StructLayout:
    return data.StructLayout({
        "multiplier": data.ArrayLayout(signed(MULTIPLIER_BITS), lanes),
        "shift": data.ArrayLayout(unsigned(SHIFT_BITS), lanes),
        "zero_point": signed(8), "clamp_min": signed(8), "clamp_max": signed(8),
    })


class Requantizer(wiring.Component):
    """``lanes`` int32 accumulators in, ``lanes`` int8 codes out, :attr:`LATENCY` cycles later.

    Members
    -------
    i_valid, i_acc, i_params, i_tag: In. ``i_params`` must be valid in the same cycle as
    ``i_acc``. ``i_tag`` is carried alongside (e.g. the destination address).
    o_valid, o_data, o_tag: Out, registered.
    """
    LATENCY = 3

    def __init__(self, lanes: int, accumulator_bits: int, tag_layout):
        self._lanes, self._acc_bits = lanes, accumulator_bits
        super().__init__({
            "i_valid": In(1),
            "i_acc": In(data.ArrayLayout(signed(accumulator_bits), lanes)),
            "i_params": In(requant_params_layout(lanes)),
            "i_tag": In(tag_layout),
            "o_valid": Out(1),
            "o_data": Out(data.ArrayLayout(signed(8), lanes)),
            "o_tag": Out(tag_layout),
        })

    def elaborate(self, platform):
        m = Module()
        lanes = self._lanes
        product_bits = self._acc_bits + MULTIPLIER_BITS
        params1 = Signal.like(self.i_params)
        params2 = Signal.like(self.i_params)
        tag1, tag2 = Signal.like(self.i_tag), Signal.like(self.i_tag)
        valid1, valid2 = Signal(), Signal()
        m.d.sync += [params1.eq(self.i_params), params2.eq(params1),
                     tag1.eq(self.i_tag), tag2.eq(tag1), self.o_tag.eq(tag2),
                     valid1.eq(self.i_valid), valid2.eq(valid1), self.o_valid.eq(valid2)]
        for lane in range(lanes):
            product = Signal(signed(product_bits), name=f"product{lane}")
            rounded = Signal(signed(product_bits), name=f"rounded{lane}")
            shift = params1.shift[lane]
            m.d.sync += product.eq(self.i_acc[lane] * self.i_params.multiplier[lane])
            half = Signal(unsigned(product_bits - 1), name=f"half{lane}")
            m.d.comb += half.eq(Const(1, product_bits - 1) << (shift - 1)[:SHIFT_BITS])
            m.d.sync += rounded.eq((product + half) >> shift)
            shifted = Signal(signed(product_bits + 1), name=f"with_zp{lane}")
            m.d.comb += shifted.eq(rounded + params2.zero_point)
            out = self.o_data[lane]
            with m.If(shifted < params2.clamp_min):
                m.d.sync += out.eq(params2.clamp_min)
            with m.Elif(shifted > params2.clamp_max):
                m.d.sync += out.eq(params2.clamp_max)
            with m.Else():
                m.d.sync += out.eq(shifted)
        return m
