"""The output unit: reads the result tensor, packs it into beats, finds the predicted class."""
from amaranth import Module, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.compiler.program import Program
from hdl.compiler.widths import Widths, bits_for
from hdl.config import OUTPUT_CLASSES
from hdl.gateware.activation_memory import ActivationMemory, read_port
from hdl.gateware.pipeline import delayed
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

        # A beat's words are read back to back, one a cycle; each lands in its slot of the
        # beat ``READ_LATENCY`` cycles after its address.
        read_addr = Signal.like(self.read.addr)
        words_left = Signal(bits_for(words) + 1)           # words not yet read
        issued = Signal(range(wpb + 1))                    # words of this beat read
        slot = Signal(range(wpb + 1))                      # words of this beat landed
        beat = Signal.like(self.beats.payload.values)
        beat_base = Signal(bits_for(words * lanes) + 1)    # index of the beat's first value
        # Argmax over the logits, in the beats that hold them: the position, the value index
        # there (registers: no sum or wide multiplexer before the comparison), the beat's
        # logits shifted one a cycle, the best so far.
        scanned = min(classes, wpb * lanes)
        scan_pos = Signal(range(max(2, classes + 1)))
        index = Signal.like(beat_base)
        logits = Signal(max(1, scanned) * bits)
        best_value = Signal(signed(bits))
        best_index = Signal(range(OUTPUT_CLASSES + 1))
        m.d.comb += self.read.addr.eq(read_addr)

        issue = Signal()
        arrive = delayed(m, issue, ActivationMemory.READ_LATENCY, "arrive")
        with m.If(arrive):
            with m.Switch(slot):
                for s in range(wpb):
                    with m.Case(s):
                        m.d.sync += beat[s * word_bits:(s + 1) * word_bits].eq(self.read.data)
            m.d.sync += slot.eq(slot + 1)

        with m.FSM(name="output"):
            with m.State("IDLE"):
                with m.If(self.start):
                    # (``beat`` is already 0: from reset, and from the last SEND. Not clearing
                    # it here keeps ``start`` off its thousand flip-flops.)
                    m.d.sync += [read_addr.eq(prog.output.base), words_left.eq(words), issued.eq(0), slot.eq(0),
                                 beat_base.eq(0), best_value.eq(sem.ACTIVATION_MIN), best_index.eq(0)]
                    m.next = "FETCH"
            with m.State("FETCH"):
                m.d.comb += issue.eq((issued != wpb) & (words_left != 0))
                with m.If(issue):
                    m.d.sync += [read_addr.eq(read_addr + 1), words_left.eq(words_left - 1), issued.eq(issued + 1)]
                with m.Elif(slot == issued):                 # every word of the beat has landed
                    m.d.sync += [scan_pos.eq(0), index.eq(beat_base), logits.eq(beat[:len(logits)])]
                    m.next = "SCAN" if classes else "SEND"
            if classes:
                with m.State("SCAN"):
                    # Values ``index = beat_base + scan_pos`` of the beat that are logits (they
                    # come first in the tensor: at most OUTPUT_CLASSES, one a cycle).
                    value = logits[:bits].as_signed()
                    with m.If((index < classes) & (value > best_value)):
                        m.d.sync += [best_value.eq(value), best_index.eq(index)]
                    m.d.sync += [scan_pos.eq(scan_pos + 1), index.eq(index + 1), logits.eq(logits >> bits)]
                    with m.If((index >= classes - 1) | (scan_pos == scanned - 1)):
                        m.next = "SEND"
            with m.State("SEND"):
                last = words_left == 0
                m.d.comb += [self.beats.valid.eq(1), self.beats.payload.values.eq(beat),
                             self.beats.payload.last.eq(last)]
                if classes:
                    # Every logit has been scanned by the last beat; earlier beats carry none.
                    with m.If(last):
                        m.d.comb += self.beats.payload.classes.eq(1 << best_index)
                with m.If(self.beats.ready):
                    m.d.sync += [issued.eq(0), slot.eq(0), beat.eq(0), beat_base.eq(beat_base + wpb * lanes)]
                    with m.If(last):
                        m.d.comb += self.done.eq(1)
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "FETCH"
        return m
