"""One processing element: an int8 x int8 multiply-accumulate cell of the systolic array."""
from amaranth import Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class ProcessingElement(wiring.Component):
    """Weight-streaming MAC cell, pipelined: operands registered, multiplied, then added.

    ``x_in`` and ``weight`` are registered beside the multiplier, their product is
    registered, and one cycle later it is added to the partial sum arriving from above
    (the three registers are a DSP's input and output registers: none has a reset, and
    the operand registers have no other load, so the ECP5 estimate moves them into the
    DSP, :func:`hdl.tools.fpga_estimate.pack_dsp_registers`). The
    activation moves right through one register, the sum down through one register, so
    a PE adds a vector's product :attr:`LATENCY` cycles after it saw the vector and the
    PE below sees that sum exactly when it adds its own product of the same vector.
    ``weight`` comes straight from the (registered) read port of a weight memory, so the
    weight changes only when the tile does.

    Parameters
    ----------
    data_bits, accumulator_bits: widths of activation/weight and of the partial sum.

    Members
    -------
    x_in, weight, psum_in: In; x_out, psum_out: Out (registered).
    """

    def __init__(self, data_bits: int = 8, accumulator_bits: int = 32):
        self._data_bits = data_bits
        self._accumulator_bits = accumulator_bits
        super().__init__({
            "x_in": In(signed(data_bits)),
            "weight": In(signed(data_bits)),
            "psum_in": In(signed(accumulator_bits)),
            "x_out": Out(signed(data_bits)),
            "psum_out": Out(signed(accumulator_bits)),
        })

    #: Cycles from ``x_in``/``weight`` to the sum that includes their product at ``psum_out``.
    LATENCY = 3

    def elaborate(self, platform):
        m = Module()
        x = Signal(signed(self._data_bits), reset_less=True)
        weight = Signal(signed(self._data_bits), reset_less=True)
        product = Signal(signed(2 * self._data_bits), reset_less=True)
        m.d.sync += [
            self.x_out.eq(self.x_in),
            x.eq(self.x_in),
            weight.eq(self.weight),
            product.eq(x * weight),
            self.psum_out.eq(self.psum_in + product),
        ]
        return m
