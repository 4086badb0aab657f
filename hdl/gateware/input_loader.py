"""The input loader: input beats in, activation-memory words out, several a cycle."""
import math

from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.compiler.program import TensorPlacement
from hdl.gateware.activation_memory import write_port


class InputLoader(wiring.Component):
    """Writes one inference's input tensor, ``words_per_beat`` words from each beat,
    ``write_words`` of them a cycle.

    It takes a beat when the previous one is written or in the cycle of its last write
    (a beat every ``ceil(words_per_beat / write_words)`` cycles while the bus keeps up),
    and after the input's last word it waits (``beats.ready`` low) until ``rearm``.

    Members
    -------
    beats: In stream, the input bus.
    write: Out, ``write_words`` consecutive words a cycle (lanes past the input disabled).
    first_beat: Out, pulses when the first beat of an inference is taken.
    done: Out, pulses with the write of the input's last word.
    rearm: In, a pulse: take the next inference's input.
    idle: Out, armed and no beat of the next inference taken yet.
    """

    def __init__(self, input: TensorPlacement, words_per_beat: int, bus_bits: int, addr_bits: int,
                 lanes: int, data_bits: int, write_words: int = 1):
        if not 1 <= write_words <= words_per_beat:
            raise ValueError(f"the loader writes 1 to {words_per_beat} words a cycle, not {write_words}")
        self._input, self._wpb, self._word_bits = input, words_per_beat, lanes * data_bits
        self._lanes, self._write_words = lanes, write_words
        super().__init__({
            "beats": In(stream.Signature(bus_bits)),
            "write": Out(write_port(addr_bits, lanes, data_bits, write_words)),
            "first_beat": Out(1), "done": Out(1), "rearm": In(1), "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        words, wpb, word_bits, per_write = self._input.words, self._wpb, self._word_bits, self._write_words
        # The schedule is fixed by the sizes: every beat but the last holds ``wpb`` words,
        # written ``per_write`` a cycle over ``beat_cycles`` cycles, the last fewer. Each
        # write's word count and the input's last write are therefore known from the
        # beat's cycles left and whether it is the last beat, registers both: no count of
        # words left, compared and subtracted in the write's own cycle (once the loader's
        # critical path).
        n_beats, beat_cycles = math.ceil(words / wpb), math.ceil(wpb / per_write)
        final_words = words - (n_beats - 1) * wpb
        final_cycles = math.ceil(final_words / per_write)
        beat_last_count = wpb - (beat_cycles - 1) * per_write           # in a beat's last write
        final_last_count = final_words - (final_cycles - 1) * per_write  # in the input's last
        final_write_at = beat_cycles - final_cycles + 1                  # its cycles left then
        armed = Signal(init=1)
        beat = Signal.like(self.beats.payload)
        addr = Signal.like(self.write.payload.addr, init=self._input.base)
        beats_left = Signal(range(n_beats + 1), init=n_beats)
        cycles_left = Signal(range(beat_cycles + 1))            # write cycles left of the beat
        final_beat = Signal()                                    # the beat holds the input's last word

        last_write = final_beat & (cycles_left == final_write_at)
        count = Signal(range(per_write + 1))
        m.d.comb += count.eq(Mux(last_write, final_last_count, Mux(cycles_left == 1, beat_last_count, per_write)))
        m.d.comb += [self.write.valid.eq(cycles_left != 0), self.write.payload.addr.eq(addr),
                     self.write.payload.data.eq(beat[:word_bits * per_write])]
        for k in range(per_write):
            m.d.comb += self.write.payload.lanes[k * self._lanes:(k + 1) * self._lanes].eq(
                Mux(k < count, (1 << self._lanes) - 1, 0))
        with m.If(self.write.valid):
            m.d.sync += [beat.eq(beat >> (word_bits * per_write)), addr.eq(addr + count),
                         cycles_left.eq(cycles_left - 1)]
            with m.If(last_write):
                # The rest of the last beat is padding.
                m.d.comb += self.done.eq(1)
                m.d.sync += [armed.eq(0), addr.eq(self._input.base), beats_left.eq(n_beats), cycles_left.eq(0)]
        # ``beats.ready`` comes from registers only (it leaves the chip). The next beat
        # enters as this one's last word leaves (not after the input's last).
        m.d.comb += [self.beats.ready.eq(armed & ((cycles_left == 0) | ((cycles_left == 1) & ~final_beat))),
                     self.idle.eq(armed & (cycles_left == 0) & (beats_left == n_beats))]
        with m.If(self.beats.valid & self.beats.ready):
            m.d.sync += [beat.eq(self.beats.payload), cycles_left.eq(beat_cycles),
                         beats_left.eq(beats_left - 1), final_beat.eq(beats_left == 1)]
            m.d.comb += self.first_beat.eq(beats_left == n_beats)
        with m.If(self.rearm):
            m.d.sync += armed.eq(1)
        return m
