"""The rows x cols grid of processing elements, with the input skew and output de-skew."""
from amaranth import Module, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.gateware.pe import ProcessingElement
from hdl.gateware.pipeline import delayed


class SystolicArray(wiring.Component):
    """A weight-streaming systolic array computing ``y[c] = sum_r x[r] * w[r][c]``.

    Activations enter on the left (row ``r`` delayed by ``r`` cycles), move right one PE
    a cycle; partial sums start at zero on top and move down one PE a cycle. PE ``(r, c)``
    therefore works on the vector that entered ``r + c`` cycles earlier, and
    ``weights[r][c]`` must hold that vector's weight then (the weight memory delivers
    weights in this diagonal skew). Each PE adds its product one cycle after multiplying,
    so the partial sums meet the products of the same vector on the way down. Column ``c``'s sum is delayed by ``cols - 1 - c`` so
    that a whole output vector leaves in one cycle, :attr:`latency` cycles after its input
    vector entered.

    With ``lane_inputs``, every row takes a word of ``cols`` activations instead, and PE
    ``(r, c)`` multiplies lane ``c`` of its row's word (delayed ``r + c`` cycles, as the
    activation of a plain row would reach it): a taps-on-rows op (see
    :mod:`hdl.compiler.program`) gives each column its own channel. A plain activation
    is then the same value in every lane.

    Members
    -------
    x: In, ``rows`` signed activations entering together (``rows`` words of ``cols``
    with ``lane_inputs``).
    weights: In, ``rows x cols`` signed weights (skewed, see above).
    y: Out, ``cols`` signed partial sums leaving together.
    """

    def __init__(self, rows: int, cols: int, data_bits: int = 8, accumulator_bits: int = 32,
                 lane_inputs: bool = False):
        self._rows, self._cols = rows, cols
        self._data_bits, self._accumulator_bits = data_bits, accumulator_bits
        self._lane_inputs = lane_inputs
        row = data.ArrayLayout(signed(data_bits), cols) if lane_inputs else signed(data_bits)
        super().__init__({
            "x": In(data.ArrayLayout(row, rows)),
            "weights": In(data.ArrayLayout(data.ArrayLayout(signed(data_bits), cols), rows)),
            "y": Out(data.ArrayLayout(signed(accumulator_bits), cols)),
        })

    @staticmethod
    def latency_for(rows: int, cols: int) -> int:
        """Cycles from an input vector at ``x`` to its sums at ``y``: the skew of the
        last column plus one pipelined PE (multiply, then add) per row."""
        return rows + cols - 2 + ProcessingElement.LATENCY

    @property
    def latency(self) -> int:
        return self.latency_for(self._rows, self._cols)

    def elaborate(self, platform):
        m = Module()
        rows, cols = self._rows, self._cols
        pes = [[ProcessingElement(self._data_bits, self._accumulator_bits) for _ in range(cols)]
               for _ in range(rows)]
        for r in range(rows):
            for c in range(cols):
                pe = pes[r][c]
                m.submodules[f"pe_{r}_{c}"] = pe
                m.d.comb += pe.weight.eq(self.weights[r][c])
                if self._lane_inputs:
                    m.d.comb += pe.x_in.eq(delayed(m, self.x[r][c], r + c, f"skew_row{r}_lane{c}"))
                elif c == 0:
                    m.d.comb += pe.x_in.eq(delayed(m, self.x[r], r, f"skew_row{r}"))
                else:
                    m.d.comb += pe.x_in.eq(pes[r][c - 1].x_out)
                if r == 0:
                    m.d.comb += pe.psum_in.eq(0)
                else:
                    m.d.comb += pe.psum_in.eq(pes[r - 1][c].psum_out)
        for c in range(cols):
            m.d.comb += self.y[c].eq(delayed(m, pes[rows - 1][c].psum_out, cols - 1 - c, f"deskew_col{c}"))
        return m
