"""The output unit: reads the result tensor, packs it into beats, finds the predicted class."""
from amaranth import Module, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.compiler.program import Program
from hdl.compiler.widths import Widths, bits_for
from hdl.config import OUTPUT_CLASSES
from hdl.gateware.activation_memory import ActivationMemory, read_port
from pytorch_ref.ir import integer_semantics as sem


def output_beat_layout(bus_bits: int) -> data.StructLayout:
    return data.StructLayout({
        "values": unsigned(bus_bits),                 # the output tensor, input-bus packing
        "classes": unsigned(OUTPUT_CLASSES),          # one-hot of the argmax (classifiers)
        "last": 1,                                    # the inference's last beat
    })


class OutputUnit(wiring.Component):
    """Streams the program's output tensor, ``words_per_beat`` words a beat.

    For a classifier (one vector of at most ``OUTPUT_CLASSES`` logits) it also scans the
    logits, one lane a cycle, for the argmax (the lowest index wins ties), and gives its
    one-hot on the inference's last beat (``last``); earlier beats and other models give 0.

    Members
    -------
    start: In, a pulse: the output tensor is complete.
    read: the activation memory's read port (owned from ``start`` to ``done``).
    beats: Out stream.
    done: Out, pulses when the last beat is taken.
    """

    def __init__(self, program: Program, widths: Widths):
        cfg = program.config
        self._program, self._lanes, self._bits = program, cfg.bank_width, cfg.data_bits
        super().__init__({
            "start": In(1),
            "read": Out(read_port(widths.act_addr, cfg.bank_width, cfg.data_bits)),
            "beats": Out(stream.Signature(output_beat_layout(cfg.input_bus_bits))),
            "done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        prog, lanes, bits = self._program, self._lanes, self._bits
        wpb, words = prog.words_per_beat, prog.output.words
        word_bits = lanes * bits
        classes = prog.output_shape[0] if prog.is_classifier else 0

        read_addr = Signal.like(self.read.addr)
        words_left = Signal(bits_for(words) + 1)
        slot = Signal(range(wpb + 1))                      # word of the beat
        beat = Signal.like(self.beats.payload.values)
        lane_base = Signal(bits_for(words * lanes) + 1)    # index of the word's first lane
        # Argmax: the word being scanned, its first index, the lane, the best so far.
        scan_word = Signal(data.ArrayLayout(signed(bits), lanes))
        scan_base = Signal.like(lane_base)
        scan_lane = Signal(range(lanes + 1))
        best_value = Signal(signed(bits))
        best_index = Signal(range(OUTPUT_CLASSES + 1))
        m.d.comb += self.read.addr.eq(read_addr)

        with m.FSM(name="output"):
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [read_addr.eq(prog.output.base), words_left.eq(words), slot.eq(0),
                                 beat.eq(0), lane_base.eq(0), best_value.eq(sem.ACTIVATION_MIN),
                                 best_index.eq(0)]
                    m.next = "ISSUE"
            with m.State("ISSUE"):
                m.d.sync += [read_addr.eq(read_addr + 1), words_left.eq(words_left - 1)]
                m.next = "WAIT1" if ActivationMemory.READ_LATENCY > 1 else "CAPTURE"
            for wait in range(1, ActivationMemory.READ_LATENCY):     # the read's latency
                with m.State(f"WAIT{wait}"):
                    m.next = f"WAIT{wait + 1}" if wait + 1 < ActivationMemory.READ_LATENCY else "CAPTURE"
            with m.State("CAPTURE"):
                with m.Switch(slot):
                    for s in range(wpb):
                        with m.Case(s):
                            m.d.sync += beat[s * word_bits:(s + 1) * word_bits].eq(self.read.data)
                m.d.sync += [slot.eq(slot + 1), lane_base.eq(lane_base + lanes),
                             scan_word.eq(self.read.data), scan_base.eq(lane_base), scan_lane.eq(0)]
                with m.If(lane_base < classes):
                    m.next = "SCAN"
                with m.Elif((slot == wpb - 1) | (words_left == 0)):
                    m.next = "SEND"
                with m.Else():
                    m.next = "ISSUE"
            with m.State("SCAN"):
                lane_value = Signal(signed(bits))
                with m.Switch(scan_lane):
                    for lane in range(lanes):
                        with m.Case(lane):
                            m.d.comb += lane_value.eq(scan_word[lane])
                index = scan_base + scan_lane
                with m.If((index < classes) & (lane_value > best_value)):
                    m.d.sync += [best_value.eq(lane_value), best_index.eq(index)]
                m.d.sync += scan_lane.eq(scan_lane + 1)
                with m.If((scan_lane == lanes - 1) | (index >= classes - 1)):
                    with m.If((slot == wpb) | (words_left == 0)):
                        m.next = "SEND"
                    with m.Else():
                        m.next = "ISSUE"
            with m.State("SEND"):
                last = words_left == 0
                m.d.comb += [self.beats.valid.eq(1), self.beats.payload.values.eq(beat),
                             self.beats.payload.last.eq(last)]
                if classes:
                    # Every logit has been scanned by the last beat; earlier beats carry none.
                    with m.If(last):
                        m.d.comb += self.beats.payload.classes.eq(1 << best_index)
                with m.If(self.beats.ready):
                    m.d.sync += [slot.eq(0), beat.eq(0)]
                    with m.If(last):
                        m.d.comb += self.done.eq(1)
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "ISSUE"
        return m
