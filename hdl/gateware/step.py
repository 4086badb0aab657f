"""The step: one activation vector times one weight tile, the unit of work of the GEMM engine."""
from amaranth import unsigned
from amaranth.lib import data, stream

from hdl.compiler.program import READ_WORDS
from hdl.compiler.widths import Widths
from hdl.config import AcceleratorConfig
from hdl.gateware.weight_memory import WEIGHT_BITS_SHAPE


def step_layout(w: Widths, cfg: AcceleratorConfig) -> data.StructLayout:
    """One step: where its activations, weights, accumulators, parameters and results are.

    The activations are the ``rows`` lanes from lane ``lane`` of word ``act_addr`` on (into
    the next word when they run past it); rows outside ``[row_lo, row_hi)``, and all rows
    when ``pad``, read the zero point instead. The results are the ``out_count`` lanes
    from lane ``out_lane`` of word ``out_addr`` on (into the next word when the destination
    is packed).

    A taps-on-rows step (``taps_on_rows``, see :mod:`hdl.compiler.program`) instead gives
    each row a whole word from the engine's window buffer: rows ``r`` of tap tile
    ``tap_tile`` of a ``kh x kw`` kernel, whose window lies ``depth`` rows above the
    buffer's bottom (rows were pushed for the next pixel since). With ``push``, the ``kw`` words from ``act_addr``
    on enter the window as its new bottom row first (words whose bit of ``pad_words`` is
    set read the zero point); a ``push_only`` step uses the array for nothing else.

    A step of a split op (``split`` columns an output, see :mod:`hdl.compiler.program`;
    0 or 1: not split) gives PE ``(r, c)`` element ``r * split + c % split`` of the words
    from ``act_addr`` on, and its finished sums are added ``split`` columns at a time."""
    return data.StructLayout({
        "act_addr": unsigned(w.act_addr), "lane": range(cfg.bank_width), "pad": 1,
        "row_lo": range(cfg.rows + 1), "row_hi": range(cfg.rows + 1),
        "w_addr": unsigned(w.weight_addr), "w_bits": WEIGHT_BITS_SHAPE,
        "first": 1, "last": 1,
        "acc_addr": unsigned(w.acc_addr),
        "p_addr": unsigned(w.param_addr),
        "out_addr": unsigned(w.act_addr), "out_lane": range(cfg.bank_width), "out_count": range(cfg.cols + 1),
        "taps_on_rows": 1, "push": 1, "push_only": 1, "pad_words": READ_WORDS,
        "tap_tile": unsigned(w.tile), "depth": unsigned(w.coord), "kh": unsigned(w.coord),
        "kw": unsigned(w.coord),
        "split": range(cfg.cols + 1),
    })


def step_stream(w: Widths, cfg: AcceleratorConfig) -> stream.Signature:
    """Steps flow without back-pressure: the array takes one every cycle."""
    return stream.Signature(step_layout(w, cfg), always_ready=True)
