"""Post-processing of finished accumulators: requantize, add the zero point, clamp.

Implements ``requantize_half_up`` of :mod:`pytorch_ref.ir.integer_semantics`, lane by lane::

    y = clamp(((acc * multiplier) + 2**(shift-1)) >> shift) + zero_point, clamp_min, clamp_max)

with the exact 64-bit product and an arithmetic shift (round half towards +infinity).
ReLU is the clamp's lower bound.
"""
from amaranth import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.config import REQUANTIZER_MULTIPLIERS
from hdl.gateware.pipeline import delay_line, delayed
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


#: Operand widths that one signed 18x18 DSP multiplier takes: 17 bits unsigned, or 18 signed.
DSP_UNSIGNED_BITS = 17


class Requantizer(wiring.Component):
    """``lanes`` int32 accumulators in, ``lanes`` int8 codes out, :attr:`LATENCY` cycles later.

    Eleven pipeline stages, each at most one adder (or one multiplexer of eight) deep: the
    inputs registered, four for the product's partial products, two to sum them with the
    rounding constant, two for the arithmetic shift, zero point and clamp, then a plain
    output register (see :attr:`OUTPUT_REGISTERS`). The partial products take ``multipliers``:
    ``"logic"``, an adder tree of the accumulator shifted by the multiplier's set bits; or
    ``"dsp"``, one DSP multiplier a lane for the largest partial product and two smaller
    adder trees for the rest (see :meth:`_dsp_terms`). (With two adder levels a stage, in
    seven stages, the trees' first stage was the requantizer's critical path alone, 121
    MHz.) ``accumulator_bits`` need only be as wide as the sums can be:
    the narrower, the smaller the trees (18 bits or fewer: one tree).

    Members
    -------
    i_valid, i_acc, i_params, i_tag: In. ``i_params`` must be valid in the same cycle as
    ``i_acc``. ``i_tag`` is carried alongside (e.g. the destination address).
    o_valid, o_data, o_tag: Out, registered.
    """
    LATENCY = 11
    #: Plain registers after the clamp, with no logic between them: the first stays beside
    #: the clamp, the last may be placed beside the memory the result is written to. (With
    #: none, the clamp's route to an output register placed beside the activation memory
    #: was the default design's critical path at 100.4 MHz: 4.1 ns of its 10.0.)
    OUTPUT_REGISTERS = 1
    #: Stages of the partial products' adder trees (one adder level each, or near).
    TREE_STAGES = 4

    def __init__(self, lanes: int, accumulator_bits: int, data_bits: int, tag_layout,
                 multipliers: str = "dsp"):
        if multipliers not in REQUANTIZER_MULTIPLIERS:
            raise ValueError(f"requantizer multipliers must be one of {REQUANTIZER_MULTIPLIERS}, not {multipliers!r}")
        self._lanes, self._acc_bits, self._multipliers = lanes, accumulator_bits, multipliers
        self._data_bits = data_bits
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
        clamp_stage = self.LATENCY - self.OUTPUT_REGISTERS
        m.d.comb += [self.o_valid.eq(valid[-1]), self.o_tag.eq(tag[-1])]
        # 1: the inputs, registered beside the multipliers (they come from across the chip,
        # and a DSP multiplier's operands go straight through it: 4.8 ns of route before
        # its 3.9 ns was the default design's critical path at 87.7 MHz). No reset: only
        # ``valid`` says whether they are used.
        acc = Signal.like(self.i_acc, name="acc", reset_less=True)
        p = Signal.like(self.i_params, name="params", reset_less=True)
        m.d.sync += [acc.eq(self.i_acc), p.eq(self.i_params)]
        # The op's zero point and clamps, a cycle before the clamp's stage (each lane then
        # registers its own copies: one register would drive every lane's adders).
        zero_point_6 = delay_line(m, p.zero_point, clamp_stage - 3, "zero_point")[-1]
        clamp_min_6 = delay_line(m, p.clamp_min, clamp_stage - 3, "clamp_min")[-1]
        clamp_max_6 = delay_line(m, p.clamp_max, clamp_stage - 3, "clamp_max")[-1]
        for lane in range(self._lanes):
            shift = delay_line(m, p.shift[lane], 7, f"shift{lane}")
            # 2-5: the partial products, whose sum is the exact product.
            if self._multipliers == "dsp":
                terms = self._dsp_terms(m, acc[lane], p.multiplier[lane], self.i_acc[lane],
                                        self.i_params.multiplier[lane], lane, product_bits)
            else:
                # The multiplier is never negative (the semantics' range): its low bits suffice.
                terms = [(pipelined_shift_add_product(
                    m, acc[lane], Value.cast(p.multiplier[lane])[:MULTIPLIER_BITS - 1], product_bits,
                    stages=self.TREE_STAGES, name=f"product{lane}"), 0)]
            # 6-7: their sum and 2**(shift-1), so that the shift rounds half up, a level of
            # adders a stage. (Wide enough for the largest shift even when the product is
            # narrower: a narrow accumulator.) The constant is registered a stage ahead,
            # from the shift alone: decoded in the adder's own stage it was the default
            # design's critical path at 93.4 MHz.
            rounding = Signal(unsigned(rounding_bits), name=f"half{lane}", reset_less=True)
            m.d.sync += rounding.eq(Const(1, rounding_bits) << (shift[3] - 1)[:SHIFT_BITS])
            terms.append((rounding, 0))
            pairs = []
            for n in range(0, len(terms), 2):
                value = sum(term << at for term, at in terms[n:n + 2])
                pair = Signal(value.shape(), name=f"sum{lane}_{n // 2}", reset_less=True)
                m.d.sync += pair.eq(value)
                pairs.append(pair)
            assert len(pairs) <= 2, "the sum takes two stages: at most four terms"
            biased = Signal(signed(max(product_bits, rounding_bits) + 1), name=f"biased{lane}")
            m.d.sync += biased.eq(sum(pairs))
            # 8-9: the arithmetic shift, by the shift's multiple of 8, then by the rest (in
            # one stage, its multiplexers were the requantizer's critical path alone, 128.5 MHz).
            coarse = Signal(signed(len(biased)), name=f"coarse{lane}", reset_less=True)
            m.d.sync += coarse.eq(biased >> Cat(Const(0, 3), shift[6][3:]))
            rounded = Signal(signed(product_bits), name=f"rounded{lane}")
            m.d.sync += rounded.eq(coarse >> shift[7][:3])
            # 10: zero point and clamp (ReLU is the lower bound), on the low bits only. With
            # d = data_bits, a ``rounded`` outside d + 1 signed bits is beyond either clamp
            # whatever the zero point: >= 2**d gives >= 2**d - 2**(d-1) > clamp_max, and
            # < -2**d gives < -2**(d-1) <= clamp_min. So its sign alone picks the clamp,
            # and the adder and comparisons are d + 2 bits wide instead of the product's
            # (whose carry chains were the requantizer's critical path alone, 102 MHz).
            # The clamps are compared before the zero point is added, with limits taken a
            # stage ahead (``with_zp < clamp_min`` is ``narrow < clamp_min - zero_point``), so
            # the adder and the comparisons are side by side, not one after the other.
            narrow_bits = self._data_bits + 1
            zero_point, clamp_min, clamp_max, low_limit, high_limit = (
                Signal.like(value, name=f"{name}{lane}", reset_less=True) for value, name in (
                    (zero_point_6, "zero_point"), (clamp_min_6, "clamp_min"), (clamp_max_6, "clamp_max"),
                    (clamp_min_6 - zero_point_6, "low_limit"), (clamp_max_6 - zero_point_6, "high_limit")))
            m.d.sync += [zero_point.eq(zero_point_6), clamp_min.eq(clamp_min_6), clamp_max.eq(clamp_max_6),
                         low_limit.eq(clamp_min_6 - zero_point_6), high_limit.eq(clamp_max_6 - zero_point_6)]
            high_bits = rounded[narrow_bits - 1:]
            fits = Signal(name=f"fits{lane}")
            m.d.comb += fits.eq((high_bits == 0) | (high_bits == (1 << len(high_bits)) - 1))
            narrow = rounded[:narrow_bits].as_signed()
            with_zp = Signal(signed(narrow_bits + 1), name=f"with_zp{lane}")
            m.d.comb += with_zp.eq(narrow + zero_point)
            below = Signal(name=f"below{lane}")
            above = Signal(name=f"above{lane}")
            m.d.comb += [below.eq(Mux(fits, narrow < low_limit, rounded[-1])),
                         above.eq(Mux(fits, narrow > high_limit, ~rounded[-1]))]
            clamped = Signal(signed(self._data_bits), name=f"clamped{lane}", reset_less=True)
            with m.If(below):
                m.d.sync += clamped.eq(clamp_min)
            with m.Elif(above):
                m.d.sync += clamped.eq(clamp_max)
            with m.Else():
                m.d.sync += clamped.eq(with_zp)
            # 11: the output, a plain register.
            m.d.comb += self.o_data[lane].eq(delayed(m, clamped, self.OUTPUT_REGISTERS, f"out{lane}"))
        return m

    def _dsp_terms(self, m, acc, multiplier, acc_in, multiplier_in, lane: int, product_bits: int) -> list:
        """Stages 2-5 of ``acc * multiplier`` with one DSP multiplier: the terms ``(value,
        shift)`` whose sum is the product. The 17 bits of the accumulator below its top
        ones (all of it when it fits 18 signed bits) times the multiplier's top 17 bits on
        the DSP (product registered there, then in the fabric), the rest as two pipelined
        shift-add trees. ``acc`` and ``multiplier`` are stage 1's registers, ``acc_in`` and
        ``multiplier_in`` the inputs they take: the DSP's operands have registers of their
        own, which drive nothing else (as the product's register), so that the estimate moves
        them into the MULT18X18D (:func:`hdl.tools.fpga_estimate.pack_dsp_registers`; shared
        with the logic trees, they left the DSP combinational, the requantizer's critical
        path alone at 124 MHz).

        With ``acc = a_hi * 2**17 + a_lo`` (``a_lo`` unsigned) and the multiplier, never
        negative, ``m_hi * 2**k + m_lo`` (``m_hi`` 17 bits)::

            acc * multiplier = (a_lo * m_hi) << k  +  (a_hi * m_hi) << (k + 17)  +  acc * m_lo
                               DSP                   logic                       logic
        """
        acc = Value.cast(acc)
        multiplier = Value.cast(multiplier)[:MULTIPLIER_BITS - 1]
        k = len(multiplier) - DSP_UNSIGNED_BITS
        m_hi, m_lo = multiplier[k:], multiplier[:k]
        wide = self._acc_bits > DSP_UNSIGNED_BITS + 1
        a_lo = acc[:DSP_UNSIGNED_BITS] if wide else acc
        # The DSP: its operands' registers, the product's, then the fabric's up to stage 5.
        dsp_a = Signal(a_lo.shape(), name=f"dsp_a{lane}", reset_less=True)
        dsp_b = Signal(m_hi.shape(), name=f"dsp_b{lane}", reset_less=True)
        in_lo = Value.cast(acc_in)[:DSP_UNSIGNED_BITS] if wide else Value.cast(acc_in)
        m.d.sync += [dsp_a.eq(in_lo), dsp_b.eq(Value.cast(multiplier_in)[:MULTIPLIER_BITS - 1][k:])]
        on_dsp = Signal(signed(len(a_lo) + len(m_hi) + 1), name=f"on_dsp{lane}", reset_less=True)
        m.d.sync += on_dsp.eq(dsp_a * dsp_b)
        for stage in range(self.TREE_STAGES - 1):
            registered = Signal.like(on_dsp, name=f"on_dsp{lane}_r{stage + 1}", reset_less=True)
            m.d.sync += registered.eq(on_dsp)
            on_dsp = registered
        terms = [(on_dsp, k)]
        # Logic: the rest.
        terms.append((pipelined_shift_add_product(m, acc, m_lo, product_bits, stages=self.TREE_STAGES,
                                                  name=f"low{lane}"), 0))
        if wide:
            a_hi = acc[DSP_UNSIGNED_BITS:].as_signed()
            terms.append((pipelined_shift_add_product(m, a_hi, m_hi, product_bits - k - DSP_UNSIGNED_BITS,
                                                      stages=self.TREE_STAGES, name=f"high{lane}"),
                          k + DSP_UNSIGNED_BITS))
        return terms
