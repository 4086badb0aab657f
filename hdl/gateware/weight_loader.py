"""The weight loader: a run-time weight image in, word writes into the memories out.

The image (:mod:`hdl.compiler.weight_image`) arrives as 32-bit beats with ``last`` on its
final beat. Beats are gathered into a word; a word's write goes out the cycle after its
last beat, to the memory of its section, at the word's index in the section. The loader
takes beats only while ``enable`` (the accelerator is between inferences) or once an image
has begun; the top level holds the input back while an image is being loaded.

An image whose ``last`` comes early is an error: the loader starts over with the next
beat. One whose final beat lacks ``last`` is an error too: the beats after it are dropped
up to and including the next ``last``. The words already written stay written; the host
loads the image again.
"""
from amaranth import Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.compiler.weight_image import BEAT_BITS, SECTIONS, ImageLayout
from hdl.compiler.widths import bits_for
from hdl.gateware.load_port import load_port


def image_beat_layout() -> data.StructLayout:
    return data.StructLayout({"data": unsigned(BEAT_BITS), "last": 1})


class WeightLoader(wiring.Component):
    """Members
    -------
    beats: In stream of image beats.
    enable: In, new images may start.
    load_<section>: Out, the word writes of each section (see ``SECTIONS``).
    busy: Out, an image has begun and is not finished.
    done, error: Out, one-cycle pulses: an image loaded whole; an image ended early or late.
    """

    def __init__(self, layout: ImageLayout):
        if not isinstance(layout, ImageLayout):
            raise TypeError(f"layout must be an ImageLayout, not {layout!r}")
        if min(layout.words) < 1:
            raise ValueError(f"every section needs at least one word, not {layout.words}")
        self._layout = layout
        members = {"beats": In(stream.Signature(image_beat_layout())), "enable": In(1),
                   "busy": Out(1), "done": Out(1), "error": Out(1)}
        for name, words, bits in zip(SECTIONS, layout.words, layout.bits):
            members[f"load_{name}"] = Out(load_port(bits_for(words), bits))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        layout = self._layout
        per_word = layout.beats_per_word
        section = Signal(range(len(SECTIONS)))
        word = Signal(bits_for(max(layout.words)))
        beat = Signal(range(max(per_word)))
        assembled = Signal(max(per_word) * BEAT_BITS)
        dropping = Signal()
        write = Signal()                                  # the word in ``assembled`` is complete
        write_section, write_word = Signal.like(section), Signal.like(word)

        for index, name in enumerate(SECTIONS):
            port = getattr(self, f"load_{name}")
            m.d.comb += [port.en.eq(write & (write_section == index)), port.addr.eq(write_word),
                         port.data.eq(assembled)]

        m.d.comb += self.beats.ready.eq(self.enable | self.busy | dropping)
        m.d.sync += write.eq(0)
        payload = self.beats.payload
        with m.If(self.beats.valid & self.beats.ready & dropping):
            with m.If(payload.last):
                m.d.sync += dropping.eq(0)
        with m.Elif(self.beats.valid & self.beats.ready):
            with m.Switch(beat):
                for index in range(max(per_word)):
                    with m.Case(index):
                        m.d.sync += assembled[index * BEAT_BITS:(index + 1) * BEAT_BITS].eq(payload.data)
            last_beat_of_word = Signal()
            last_word = Signal()
            with m.Switch(section):
                for index in range(len(SECTIONS)):
                    with m.Case(index):
                        m.d.comb += [last_beat_of_word.eq(beat == per_word[index] - 1),
                                     last_word.eq(word == layout.words[index] - 1)]
            final = last_beat_of_word & last_word & (section == len(SECTIONS) - 1)
            m.d.sync += [self.busy.eq(1), beat.eq(beat + 1)]
            with m.If(last_beat_of_word):
                m.d.sync += [write.eq(1), write_section.eq(section), write_word.eq(word), beat.eq(0),
                             word.eq(word + 1)]
                with m.If(last_word):
                    m.d.sync += [word.eq(0), section.eq(section + 1)]
            with m.If(final | payload.last):                # the image ends here, well or not
                m.d.sync += [section.eq(0), word.eq(0), beat.eq(0), self.busy.eq(0)]
                with m.If(final & payload.last):
                    m.d.comb += self.done.eq(1)
                with m.Else():
                    m.d.comb += self.error.eq(1)
                    m.d.sync += dropping.eq(~payload.last)
        return m
