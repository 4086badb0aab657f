"""An AXI4-Lite slave holding the registers of :mod:`hdl.gateware.axi.registers`."""
from __future__ import annotations

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.gateware.axi.registers import ADDRESS_BITS, Register

DATA_BITS = 32
#: AXI response codes.
OKAY, SLVERR = 0b00, 0b10


def axi_lite_signature(address_bits: int = ADDRESS_BITS) -> dict:
    """AXI4-Lite slave ports, named as Vivado and cocotbext-axi expect (``s_axi_*``)."""
    return {
        "s_axi_awaddr": In(address_bits), "s_axi_awvalid": In(1), "s_axi_awready": Out(1),
        "s_axi_wdata": In(DATA_BITS), "s_axi_wstrb": In(DATA_BITS // 8), "s_axi_wvalid": In(1),
        "s_axi_wready": Out(1),
        "s_axi_bresp": Out(2), "s_axi_bvalid": Out(1), "s_axi_bready": In(1),
        "s_axi_araddr": In(address_bits), "s_axi_arvalid": In(1), "s_axi_arready": Out(1),
        "s_axi_rdata": Out(DATA_BITS), "s_axi_rresp": Out(2), "s_axi_rvalid": Out(1), "s_axi_rready": In(1),
    }


class RegisterFile(wiring.Component):
    """AXI4-Lite slave over a register map.

    One write and one read in flight: the address and data of a write are taken in any
    order, the write happens when both are in, and its response follows the next cycle;
    a read answers the cycle after its address. An address outside the map answers
    SLVERR (reads return 0). Write strobes select bytes.

    Members, per register ``R`` (only those its fields need)
    -------------------------------------------------------
    ``hw_R``: In(32), the ``ro`` fields' values; for ``w1c`` fields, set bits (a pulse sets).
    ``R``: Out(32), the stored ``rw`` and ``w1c`` fields.
    ``pulse_R``: Out(32), the ``w1p`` fields written with 1, for one cycle.
    """

    def __init__(self, registers: tuple[Register, ...], address_bits: int = ADDRESS_BITS):
        if not registers:
            raise ValueError("a register file needs at least one register")
        if max(r.offset for r in registers) >> address_bits:
            raise ValueError(f"address bits must cover offset {max(r.offset for r in registers):#x}, "
                             f"not {address_bits}")
        self._registers = registers
        members = axi_lite_signature(address_bits)
        for r in registers:
            if r.mask("ro", "w1c"):
                members[f"hw_{r.name}"] = In(DATA_BITS)
            if r.mask("rw", "w1c"):
                members[r.name] = Out(DATA_BITS)
            if r.mask("w1p"):
                members[f"pulse_{r.name}"] = Out(DATA_BITS)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        aw, w = Signal(), Signal()                  # address / data of a write taken
        waddr, wdata, wstrb = (Signal.like(self.s_axi_awaddr), Signal(DATA_BITS), Signal(DATA_BITS // 8))
        m.d.comb += [self.s_axi_awready.eq(~aw & ~self.s_axi_bvalid), self.s_axi_wready.eq(~w & ~self.s_axi_bvalid)]
        with m.If(self.s_axi_awvalid & self.s_axi_awready):
            m.d.sync += [aw.eq(1), waddr.eq(self.s_axi_awaddr)]
        with m.If(self.s_axi_wvalid & self.s_axi_wready):
            m.d.sync += [w.eq(1), wdata.eq(self.s_axi_wdata), wstrb.eq(self.s_axi_wstrb)]
        write = Signal()
        m.d.comb += write.eq(aw & w)
        with m.If(write):
            m.d.sync += [aw.eq(0), w.eq(0), self.s_axi_bvalid.eq(1), self.s_axi_bresp.eq(SLVERR)]
        with m.If(self.s_axi_bvalid & self.s_axi_bready):
            m.d.sync += self.s_axi_bvalid.eq(0)
        byte_mask = Cat(*[bit.replicate(8) for bit in wstrb])
        written = wdata & byte_mask

        m.d.comb += self.s_axi_arready.eq(~self.s_axi_rvalid)
        with m.If(self.s_axi_rvalid & self.s_axi_rready):
            m.d.sync += self.s_axi_rvalid.eq(0)
        with m.If(self.s_axi_arvalid & self.s_axi_arready):
            m.d.sync += [self.s_axi_rvalid.eq(1), self.s_axi_rdata.eq(0), self.s_axi_rresp.eq(SLVERR)]

        for r in self._registers:
            stored_mask, rw, w1c, w1p = r.mask("rw", "w1c"), r.mask("rw"), r.mask("w1c"), r.mask("w1p")
            hw = getattr(self, f"hw_{r.name}") if r.mask("ro", "w1c") else 0
            stored = getattr(self, r.name) if stored_mask else 0
            hit_write = write & (waddr == r.offset)
            if stored_mask:
                value = Signal(DATA_BITS, name=f"{r.name}_next")
                m.d.comb += value.eq(stored)
                with m.If(hit_write):
                    m.d.comb += value.eq(((stored & ~(byte_mask & rw)) | (written & rw)) & ~(written & w1c))
                # A set from the hardware wins over a clear in the same cycle.
                m.d.sync += stored.eq((value | (hw & w1c)) & stored_mask)
            if w1p:
                pulse = getattr(self, f"pulse_{r.name}")
                m.d.sync += pulse.eq(0)
                with m.If(hit_write):
                    m.d.sync += pulse.eq(written & w1p)
            with m.If(hit_write):
                m.d.sync += self.s_axi_bresp.eq(OKAY)
            with m.If(self.s_axi_arvalid & self.s_axi_arready & (self.s_axi_araddr == r.offset)):
                m.d.sync += [self.s_axi_rdata.eq((hw & r.mask("ro")) | stored), self.s_axi_rresp.eq(OKAY)]
        return m
