"""The AXI4-Lite register map of ``neural_network_accelerator_axi``: the one source.

The gateware (:class:`~hdl.gateware.axi.register_file.RegisterFile`), the C header and
the Python module (:mod:`hdl.writers.register_map`) and the README's table are all
generated from :data:`REGISTERS`. Registers are 32 bits at word-aligned byte offsets.

Field access:
- ``ro``: read-only, driven by the hardware;
- ``rw``: read/write storage;
- ``w1c``: set by the hardware, cleared by writing 1 (sticky status and interrupt bits);
- ``w1p``: writing 1 pulses the hardware for one cycle; reads 0.
"""
from __future__ import annotations

from dataclasses import dataclass

ACCESS = ("ro", "rw", "w1c", "w1p")
#: "NNAC" in ASCII.
ID_VALUE = 0x4E4E4143
VERSION_MAJOR, VERSION_MINOR = 1, 0


@dataclass(frozen=True)
class Field:
    name: str
    lsb: int
    width: int
    access: str
    doc: str

    def __post_init__(self):
        if self.access not in ACCESS:
            raise ValueError(f"field access must be one of {', '.join(ACCESS)}, not {self.access!r}")
        if not (0 <= self.lsb and self.width >= 1 and self.lsb + self.width <= 32):
            raise ValueError(f"field {self.name} must lie within 32 bits, not [{self.lsb}+:{self.width}]")

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb


@dataclass(frozen=True)
class Register:
    name: str
    offset: int
    doc: str
    fields: tuple[Field, ...]

    def __post_init__(self):
        if self.offset % 4:
            raise ValueError(f"register {self.name} offset must be word-aligned, not {self.offset:#x}")
        used = 0
        for f in self.fields:
            if used & f.mask:
                raise ValueError(f"register {self.name}: field {f.name} overlaps another")
            used |= f.mask

    def mask(self, *access: str) -> int:
        """The bits of the fields with one of these accesses."""
        return sum(f.mask for f in self.fields if f.access in access)


def _whole(name: str, access: str, doc: str) -> tuple[Field, ...]:
    return (Field(name, 0, 32, access, doc),)


REGISTERS: tuple[Register, ...] = (
    Register("ID", 0x00, "identification", _whole("value", "ro", f"{ID_VALUE:#010x} (\"NNAC\")")),
    Register("VERSION", 0x04, "register-map version", (
        Field("minor", 0, 16, "ro", f"{VERSION_MINOR}"), Field("major", 16, 16, "ro", f"{VERSION_MAJOR}"))),
    Register("ARRAY", 0x08, "the array and the program", (
        Field("rows", 0, 8, "ro", "array rows"), Field("cols", 8, 8, "ro", "array columns"),
        Field("ops", 16, 8, "ro", "ops of the program (phases: op k for k < ops, input load = ops, "
                                  "output = ops + 1)"),
        Field("runtime_weights", 24, 1, "ro", "the weights are loadable (s_axis_weights)"))),
    Register("BUS", 0x0C, "stream widths in bits", (
        Field("input_bits", 0, 16, "ro", "s_axis TDATA width"),
        Field("output_bits", 16, 16, "ro", "m_axis TDATA width"))),
    Register("FRAME", 0x10, "beats of one inference on the streams", (
        Field("input_beats", 0, 16, "ro", "s_axis beats per inference (the last has TLAST)"),
        Field("output_beats", 16, 16, "ro", "m_axis beats per inference (the last has TLAST)"))),
    Register("MODEL_HASH", 0x14, "the first 32 bits of the compiled program's SHA-256",
             _whole("value", "ro", "see Program.fingerprint")),
    Register("STATUS", 0x18, "state and sticky errors", (
        Field("idle", 0, 1, "ro", "no inference in flight"),
        Field("busy", 1, 1, "ro", "an inference is in flight (first input beat to its end)"),
        Field("frame_early", 8, 1, "w1c", "an input frame ended (TLAST) before its last beat"),
        Field("frame_late", 9, 1, "w1c", "an input frame's last beat came without TLAST"),
        Field("weights_error", 10, 1, "w1c", "a weight image ended early or late (load it again)"))),
    Register("CONTROL", 0x1C, "control", (
        Field("soft_reset", 0, 1, "w1p", "reset the accelerator and the streams (not the registers)"),
        Field("irq_enable", 1, 1, "rw", "drive the `irq` output from IRQ"))),
    Register("IRQ", 0x20, "interrupt causes; `irq` = irq_enable and any of them", (
        Field("done", 0, 1, "w1c", "an inference ended (its output sent, or dropped after a frame error)"),
        Field("error", 1, 1, "w1c", "a frame or weight-image error (see STATUS)"),
        Field("weights_loaded", 2, 1, "w1c", "a weight image was loaded whole"))),
    Register("RESULT", 0x24, "the last inference's predicted class", (
        Field("class_index", 0, 4, "ro", "argmax of the logits, lowest index on ties"),
        Field("valid", 31, 1, "ro", "the model is a classifier of at most 10 classes and the last "
                                    "inference had no frame error"))),
    Register("INFERENCES", 0x28, "inferences whose output was sent", _whole("count", "ro", "wraps")),
    Register("FRAME_ERRORS", 0x2C, "input frames with an error (their output is dropped)",
             _whole("count", "ro", "wraps")),
    Register("LAST_CYCLES", 0x30, "cycles of the last inference, first input beat to last output beat",
             _whole("cycles", "ro", "")),
    Register("LAST_BUSY", 0x34, "array steps issued in the last inference (rows x cols MAC slots each)",
             _whole("steps", "ro", "")),
    Register("PHASE_SELECT", 0x38, "the phase shown by PHASE_CYCLES and PHASE_BUSY",
             (Field("phase", 0, 8, "rw", "op k for k < ops, input load = ops, output = ops + 1"),)),
    Register("PHASE_CYCLES", 0x3C, "cycles of the selected phase in the last inference",
             _whole("cycles", "ro", "")),
    Register("PHASE_BUSY", 0x40, "array steps of the selected phase in the last inference",
             _whole("steps", "ro", "")),
    Register("WEIGHT_LOADS", 0x44, "weight images loaded whole", _whole("count", "ro", "wraps")),
)

BY_NAME = {r.name: r for r in REGISTERS}
if len(BY_NAME) != len(REGISTERS) or len({r.offset for r in REGISTERS}) != len(REGISTERS):
    raise ValueError("register names and offsets must be unique")
#: Address bits the AXI4-Lite slave decodes (byte address).
ADDRESS_BITS = max(r.offset for r in REGISTERS).bit_length()
