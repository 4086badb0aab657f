"""The output unit: reads the result tensor, packs it into beats, finds the predicted class."""
from amaranth import Module, Mux, Signal, signed, unsigned
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
    """Streams the program's output tensor, ``words_per_beat`` words a beat: a word a cycle
    while the beats are taken (the next beat is read while one is sent).

    For a classifier (one vector of at most ``OUTPUT_CLASSES`` logits) it also finds the
    argmax of the logits (the lowest index wins ties), a beat's logits at a time through a
    tournament of registered pairwise comparisons (``ceil(log2(n))`` cycles for ``n`` of them,
    against ``n`` one lane a cycle), and gives its one-hot on the inference's last beat
    (``last``); earlier beats and other models give 0. The tournament's first level is
    loaded as the words land, and its winner is compared with the best of earlier beats
    as the beat is sent, so that a classifier's beat waits ``ceil(log2(n))`` cycles for it,
    not two more.

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

        # Words are read one a cycle and land ``READ_LATENCY`` cycles after their address
        # in the slots of ``beat``, the beat being assembled (slot ``fill``, counting the
        # landed words modulo the beat); a full beat moves to ``out``, the beat being sent,
        # when that is empty. So that the next beat's reads need not wait for the last words
        # of this one to land, a beat's first read may be issued while the beat before it
        # is still in flight, as long as ``out`` is empty: nothing but that beat fills
        # ``out``, so it moves there when full, at the latest as the next beat's first word
        # lands in slot 0. With at least ``READ_LATENCY + 3`` words a beat (16 on a 1024-bit
        # bus and 8 lanes), a tensor streams at a word a cycle. The host's ``ready`` reaches
        # only ``out``'s valid bit and ``done``: a beat's move, which enables a thousand
        # flip-flops across the chip, is decided from registers. (With ``ready`` in it, the
        # move was the default design's critical path, 71.8 MHz.)
        read_addr = Signal.like(self.read.addr)
        words_left = Signal(bits_for(words) + 1)           # words not yet read
        landed_left = Signal(bits_for(words) + 1)          # words not yet landed
        issued = Signal(range(wpb + 1))                    # words of the beat being read, read
        fill = Signal(range(wpb))                          # the slot the next word lands in
        full, full_last = Signal(), Signal()               # ``beat`` is whole; it is the last
        pending = Signal(range(3))                         # beats begun and not yet in ``out``
        beat = Signal.like(self.beats.payload.values, reset_less=True)
        out, out_valid, out_last = Signal.like(beat), Signal(), Signal()
        beat_base = Signal(bits_for(words * lanes) + 1)    # index of the assembled beat's first value
        m.d.comb += self.read.addr.eq(read_addr)

        # Argmax over the logits, in the beats that hold them: each landing word's values
        # loaded into the tournament's first level with their indices, the values that are
        # not logits as the lowest code (they come after the logits, so that they lose every
        # pair and never beat the best so far); the best so far, across beats. (A slot whose
        # word does not land, past the tensor's end, holds the lowest code from the start or
        # the last beat sent.) A classifier's beats do not overlap: the first level holds
        # one beat's values from their landing until the beat is sent, and the beat moves to
        # ``out`` when the tournament's winner is out, compared with the best so far as the
        # beat is sent.
        scanned = min(classes, wpb * lanes)
        contenders = [_Contender(bits, classes, f"logit{p}") for p in range(max(1, scanned))]
        best_value = Signal(signed(bits))
        best_index = Signal(range(OUTPUT_CLASSES + 1))
        winner, rounds = _tournament(m, contenders, bits, classes)
        scan_cycle = Signal(range(rounds + 1))             # cycles the full beat has waited
        clear_contenders = [contender.value.eq(sem.ACTIVATION_MIN) for contender in contenders[:scanned]]
        winner_is_best = winner.value > best_value

        move = Signal()
        if classes:
            # The first level is whole with the beat: its winner is out ``rounds`` cycles
            # later, when the beat is in ``out``.
            m.d.comb += move.eq(full & ~out_valid & (scan_cycle >= max(rounds - 1, 0)))
            with m.If(full & ~move):
                m.d.sync += scan_cycle.eq(scan_cycle + 1)
            with m.Else():
                m.d.sync += scan_cycle.eq(0)
            begin_beat = (pending == 0) & ~out_valid
        else:
            m.d.comb += move.eq(full & ~out_valid)
            begin_beat = (pending == 0) | ((pending == 1) & ~out_valid)

        issue, first_word = Signal(), Signal()
        within_beat = (issued != wpb) & (issued != 0)
        m.d.comb += [issue.eq((words_left != 0) & (within_beat | begin_beat)), first_word.eq(issue & ~within_beat)]
        with m.If(issue):
            m.d.sync += [read_addr.eq(read_addr + 1), words_left.eq(words_left - 1),
                         issued.eq(Mux(issued == wpb, 1, issued + 1))]

        # The last beat's slots past the tensor are sent as 0.
        tail = words % wpb
        with m.If(move):
            m.d.sync += [out.eq(beat), out_last.eq(full_last), full.eq(0), beat_base.eq(beat_base + wpb * lanes)]
            if tail:
                with m.If(full_last):
                    m.d.sync += out[tail * word_bits:].eq(0)
        arrive = delayed(m, issue, ActivationMemory.READ_LATENCY, "arrive")
        with m.If(arrive):
            with m.Switch(fill):
                for s in range(wpb):
                    with m.Case(s):
                        m.d.sync += beat[s * word_bits:(s + 1) * word_bits].eq(self.read.data)
                        for p in range(s * lanes, min(scanned, (s + 1) * lanes)):
                            m.d.sync += [contenders[p].value.eq(Mux(beat_base + p < classes,
                                                                    self.read.data[p - s * lanes],
                                                                    sem.ACTIVATION_MIN)),
                                         contenders[p].index.eq(beat_base + p)]
            last_word = landed_left == 1
            m.d.sync += landed_left.eq(landed_left - 1)
            with m.If((fill == wpb - 1) | last_word):        # the word completes the beat
                m.d.sync += [fill.eq(0), full.eq(1), full_last.eq(last_word)]
            with m.Else():
                m.d.sync += fill.eq(fill + 1)
        m.d.sync += pending.eq(pending + first_word - move)

        with m.If(self.start):                             # (only while no inference is in flight)
            m.d.sync += [read_addr.eq(prog.output.base), words_left.eq(words), landed_left.eq(words),
                         issued.eq(0), beat_base.eq(0), best_value.eq(sem.ACTIVATION_MIN), best_index.eq(0),
                         *clear_contenders]

        m.d.comb += [self.beats.valid.eq(out_valid), self.beats.payload.values.eq(out),
                     self.beats.payload.last.eq(out_last)]
        if classes:
            # Every logit has been scanned by the last beat; earlier beats carry none.
            with m.If(out_last):
                m.d.comb += self.beats.payload.classes.eq(1 << Mux(winner_is_best, winner.index, best_index))
        with m.If(out_valid & self.beats.ready):
            m.d.sync += out_valid.eq(0)
            if classes:
                m.d.sync += clear_contenders
                with m.If(winner_is_best):
                    m.d.sync += [best_value.eq(winner.value), best_index.eq(winner.index)]
            with m.If(out_last):
                m.d.comb += self.done.eq(1)
        with m.If(move):                                   # (after the clear above: a move wins)
            m.d.sync += out_valid.eq(1)
        return m


class _Contender:
    """A value in the argmax tournament and its index (registers without a reset: the
    tournament is loaded before it is read)."""

    def __init__(self, bits: int, classes: int, name: str):
        self.value = Signal(signed(bits), name=f"{name}_value", reset_less=True)
        self.index = Signal(range(max(2, classes)), name=f"{name}_index", reset_less=True)


def _tournament(m, contenders, bits: int, classes: int):
    """Registered rounds of pairwise comparisons down to one winner; returns it and the
    number of rounds. Of a pair, the first (lower index) wins ties; an odd one out goes on
    through a register, so every round is one cycle."""
    level, rounds = list(contenders), 0
    while len(level) > 1:
        following = []
        for k in range(0, len(level), 2):
            pair = level[k:k + 2]
            node = _Contender(bits, classes, f"round{rounds}_{k // 2}")
            if len(pair) == 1:
                first = pair[0]
                m.d.sync += [node.value.eq(first.value), node.index.eq(first.index)]
            else:
                first, second = pair
                take_first = first.value >= second.value
                m.d.sync += [node.value.eq(Mux(take_first, first.value, second.value)),
                             node.index.eq(Mux(take_first, first.index, second.index))]
            following.append(node)
        level, rounds = following, rounds + 1
    return level[0], rounds
