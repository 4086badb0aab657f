"""One processing element: an int8 x int8 multiply-accumulate cell of the systolic array."""
from amaranth import Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class ProcessingElement(wiring.Component):
    """Weight-streaming MAC cell.

    Each cycle the PE adds ``x_in * weight`` to the partial sum arriving from above and
    passes the activation right and the sum down, both through one register.
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

    def elaborate(self, platform):
        m = Module()
        m.d.sync += [
            self.x_out.eq(self.x_in),
            self.psum_out.eq(self.psum_in + self.x_in * self.weight),
        ]
        return m
