"""Tests of the VHDL back end (hdl.writers.vhdl): cell-by-cell differential simulation against
Amaranth's Verilog, Amaranth-level designs, clean GHDL analysis, and clear errors."""

import random
import re
import shutil
import subprocess
import time
import zlib

import pytest
from amaranth import Array, ClockDomain, Elaboratable, Module, Print, Signal, signed, unsigned
from amaranth.back import verilog
from amaranth.utils import ceil_log2
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from hdl.writers.vhdl import (SUPPORTED_CELLS, UnsupportedCellError, convert, netlist_cell_types)
from hdl.writers.vhdl import emit, netlist

from tests.vhdl_harness import (check_design, check_rtlil, compare, ports_of, random_stimulus,
                           require_tools, simulate)


# --- Hand-written RTLIL: every supported cell type with random parameters ----------------

_BINARY = {"$add", "$sub", "$mul", "$and", "$or", "$xor", "$xnor", "$div", "$mod",
           "$divfloor", "$modfloor", "$eq", "$eqx", "$ne", "$nex", "$lt", "$le", "$gt", "$ge",
           "$logic_and", "$logic_or", "$shl", "$sshl", "$shr", "$sshr", "$shift", "$shiftx"}
_UNARY = {"$not", "$pos", "$neg", "$reduce_and", "$reduce_or", "$reduce_xor", "$reduce_xnor",
          "$reduce_bool", "$logic_not"}
_MUXES = {"$mux", "$pmux", "$bmux", "$demux"}
_FLOPS = {"$dff", "$dffe", "$adff", "$adffe", "$sdff", "$sdffe", "$sdffce"}
_SHIFTS = {"$shl", "$sshl", "$shr", "$sshr", "$shift", "$shiftx"}
# Yosys (0.50) requires A_SIGNED == B_SIGNED for these, A_SIGNED == 0 for $shiftx, and
# B_SIGNED == 0 for the shifts by an unsigned amount.
_SAME_SIGNEDNESS = _BINARY - _SHIFTS - {"$logic_and", "$logic_or"}
_UNSIGNED_AMOUNT = {"$shl", "$sshl", "$shr", "$sshr"}

# Cell groups simulated as one design each (one GHDL + one Icarus run per group).
# Verilog `x` matches any VHDL bit, so each test says how many output bits may be x, and
# why; everything else (the accelerator, random designs) allows none.
X_ALLOWED = {
    "division": 0.25,     # x / 0 and x % 0 are x in Verilog
    "flop": 0.05,         # flops without an initial value, before their first clock edge
    "shift": 0.2,         # shifts by an amount with x bits
}

CELL_GROUPS = {
    "arith": ["$add", "$sub", "$mul", "$neg", "$pos", "$not"],
    "bitwise": ["$and", "$or", "$xor", "$xnor", "$reduce_and", "$reduce_or", "$reduce_xor",
                "$reduce_xnor", "$reduce_bool", "$logic_not", "$logic_and", "$logic_or"],
    "compare": ["$eq", "$eqx", "$ne", "$nex", "$lt", "$le", "$gt", "$ge"],
    "shift": sorted(_SHIFTS),
    "division": ["$div", "$mod", "$divfloor", "$modfloor"],
    "mux": sorted(_MUXES),
    "flop": sorted(_FLOPS),
}


class _Rtlil:
    """A module ``top`` with one input port per cell input and one output per cell output."""

    def __init__(self):
        self.wires, self.cells, self.ports = [], [], 0

    def port(self, name, width, direction, init=None):
        self.ports += 1
        if init is not None:
            self.wires.append(f"  attribute \\init {width}'{init}")
        self.wires.append(f"  wire width {width} {direction} {self.ports} \\{name}")
        return f"\\{name}"

    def cell(self, kind, name, params, connections):
        # `\name`, not `$name`: Yosys's Verilog writer names $pmux functions after the cell.
        lines = [f"  cell {kind} \\{name}"]
        lines += [f"    parameter \\{key} {value}" for key, value in params.items()]
        lines += [f"    connect \\{port} {wire}" for port, wire in connections.items()]
        self.cells.append("\n".join(lines + ["  end"]))

    def text(self):
        return "\n".join(["attribute \\top 1", "module \\top", *self.wires, *self.cells,
                          "end", ""])


def _bits(rng, width):
    return "".join(rng.choice("01") for _ in range(width))


def _add_cell(design, rng, kind, index):
    name = f"c{index}"
    def width(low=1, high=12):
        return rng.randint(low, high)
    def inp(port, w):
        return design.port(f"{name}_{port.lower()}", w, "input")
    def out(port, w, init=None):
        return design.port(f"{name}_{port.lower()}", w, "output", init)
    if kind in _BINARY or kind in _UNARY:
        a_width = width(1, 16 if kind == "$mul" else 12)
        y_width = width(1, 16)
        params = {"A_SIGNED": rng.randint(0, 1), "A_WIDTH": a_width, "Y_WIDTH": y_width}
        connections = {"A": inp("A", a_width)}
        if kind in _BINARY:
            b_width = width(1, 12)
            if kind in _SHIFTS - {"$shiftx"} and rng.random() < 0.3:
                # Amounts wider than a VHDL integer. Not for $shiftx: Icarus computes its
                # part-select offset in 32 bits, so a huge offset wraps into range there.
                b_width = rng.randint(31, 40)
            b_signed = params["A_SIGNED"] if kind in _SAME_SIGNEDNESS else rng.randint(0, 1)
            if kind in _UNSIGNED_AMOUNT:
                b_signed = 0
            if kind == "$shiftx":
                params["A_SIGNED"] = 0
            params.update(B_SIGNED=b_signed, B_WIDTH=b_width)
            connections["B"] = inp("B", b_width)
        connections["Y"] = out("Y", y_width)
        design.cell(kind, name, params, connections)
    elif kind == "$mux":
        w = width()
        design.cell(kind, name, {"WIDTH": w}, {
            "A": inp("A", w), "B": inp("B", w), "S": inp("S", 1), "Y": out("Y", w)})
    elif kind == "$pmux":
        w, s = width(), width(1, 5)
        design.cell(kind, name, {"WIDTH": w, "S_WIDTH": s}, {
            "A": inp("A", w), "B": inp("B", w * s), "S": inp("S", s), "Y": out("Y", w)})
    elif kind in ("$bmux", "$demux"):
        w, s = width(1, 6), width(1, 3)
        wide, narrow = w << s, w
        design.cell(kind, name, {"WIDTH": w, "S_WIDTH": s}, {
            "A": inp("A", wide if kind == "$bmux" else narrow), "S": inp("S", s),
            "Y": out("Y", narrow if kind == "$bmux" else wide)})
    else:
        w = width()
        params = {"WIDTH": w, "CLK_POLARITY": rng.randint(0, 1)}
        connections = {"CLK": "\\clk", "D": inp("D", w)}
        if kind in ("$dffe", "$adffe", "$sdffe", "$sdffce"):
            params["EN_POLARITY"] = rng.randint(0, 1)
            connections["EN"] = inp("EN", 1)
        if kind.startswith("$sdff"):
            params.update(SRST_POLARITY=rng.randint(0, 1), SRST_VALUE=f"{w}'{_bits(rng, w)}")
            connections["SRST"] = inp("SRST", 1)
        if kind.startswith("$adff"):
            params.update(ARST_POLARITY=rng.randint(0, 1), ARST_VALUE=f"{w}'{_bits(rng, w)}")
            connections["ARST"] = inp("ARST", 1)
        connections["Q"] = out("Q", w, init=_bits(rng, w))
        design.cell(kind, name, params, connections)


def random_cells_rtlil(kinds, count, seed):
    rng = random.Random(seed)
    design = _Rtlil()
    if set(kinds) & _FLOPS:
        design.port("clk", 1, "input")
    for index in range(count):
        _add_cell(design, rng, kinds[index % len(kinds)], index)
    return design.text()


def test_groups_cover_supported_cells():
    covered = {kind for kinds in CELL_GROUPS.values() for kind in kinds}
    assert covered == SUPPORTED_CELLS - {"$mem_v2"}


@pytest.mark.parametrize("group", sorted(CELL_GROUPS))
def test_cells_match_verilog(group, tmp_path):
    kinds = CELL_GROUPS[group]
    rtlil_text = random_cells_rtlil(kinds, count=6 * len(kinds), seed=zlib.crc32(group.encode()) & 0xffff)
    check_rtlil(rtlil_text, tmp_path, cycles=96, seed=1, max_x_fraction=X_ALLOWED.get(group, 0.0))


def test_width_one_mixed_signedness(tmp_path):
    """Every 1-bit operand combination of the signedness-sensitive cells."""
    design = _Rtlil()
    index = 0
    for kind in ["$add", "$sub", "$mul", "$lt", "$ge", "$eq", "$and", "$sshr", "$shift",
                 "$div", "$modfloor", "$neg", "$not"]:
        for a_signed in (0, 1):
            for b_signed in (0, 1):
                for y_width in (1, 3):
                    if kind in _SAME_SIGNEDNESS and a_signed != b_signed:
                        continue
                    if kind in _UNSIGNED_AMOUNT and b_signed:
                        continue
                    params = {"A_SIGNED": a_signed, "A_WIDTH": 1, "Y_WIDTH": y_width}
                    connections = {"A": design.port(f"c{index}_a", 1, "input")}
                    if kind not in ("$neg", "$not"):
                        params.update(B_SIGNED=b_signed, B_WIDTH=1)
                        connections["B"] = design.port(f"c{index}_b", 1, "input")
                    connections["Y"] = design.port(f"c{index}_y", y_width, "output")
                    design.cell(kind, f"c{index}", params, connections)
                    index += 1
    ports = ports_of(netlist.from_rtlil(design.text(), "top"))
    inputs = [port.name for port in ports if port.direction == "input"]
    # All four combinations of (A, B), every cell at once.
    stimulus = [{name: (n >> (name.endswith("_b"))) & 1 for name in inputs} for n in range(4)]
    check_rtlil(design.text(), tmp_path, stimulus, max_x_fraction=0.1)   # x / 0 in the Verilog


# --- Amaranth designs ----------------------------------------------------------------

class _Operators(Elaboratable):
    """Every Amaranth operator on mixed-signedness operands of odd widths."""

    def __init__(self):
        self.a, self.b = Signal(signed(7), name="a"), Signal(unsigned(5), name="b")
        self.c, self.d = Signal(signed(1), name="c"), Signal(unsigned(1), name="d")
        self.ys = [Signal(signed(12), name=f"y{i}") for i in range(22)]
        self.ports = [self.a, self.b, self.c, self.d, *self.ys]

    def elaborate(self, platform):
        m = Module()
        a, b, c, d = self.a, self.b, self.c, self.d
        exprs = [a + b, a - b, a * b, b * c, -a, ~b, a & b, a | c, a ^ b, a // b, a % b,
                 b // c, a < b, b >= a, a == c, a >> b, a << b[:3], b >> d, a.bit_select(b, 3),
                 a.any() & b.all() | c.xor(), a.as_unsigned() * a, (a + b * c - d).as_signed()]
        for y, expr in zip(self.ys, exprs):
            m.d.comb += y.eq(expr)
        return m


def test_amaranth_operators(tmp_path):
    design = _Operators()
    check_design(design, tmp_path, ports=design.ports, cycles=128)


class _Switches(wiring.Component):
    """Switch with overlapping and wildcard cases, If/Elif chains and an Array index."""
    sel: In(4)
    x: In(8)
    y: Out(8)
    z: Out(8)

    def elaborate(self, platform):
        m = Module()
        with m.Switch(self.sel):
            with m.Case("1--0"):
                m.d.comb += self.y.eq(self.x)
            with m.Case(0, 1, 2):
                m.d.comb += self.y.eq(~self.x)
            with m.Case("---1"):     # overlaps with the case of 1
                m.d.comb += self.y.eq(self.x + 1)
            with m.Default():
                m.d.comb += self.y.eq(0x5a)
        with m.If(self.x[0]):
            m.d.comb += self.z.eq(Array([self.sel, self.x, 7])[self.sel[:2]])
        with m.Elif(self.x[1]):
            m.d.comb += self.z.eq(self.sel * 3)
        return m


def test_amaranth_switches(tmp_path):
    check_design(_Switches(), tmp_path, cycles=128)


class _Registers(Elaboratable):
    """Registers with reset values and enables, in a synchronously or asynchronously reset
    ``sync`` domain."""

    def __init__(self, async_reset):
        self.sync = ClockDomain("sync", async_reset=async_reset)
        self.en, self.d = Signal(name="en"), Signal(signed(6), name="d")
        self.q1 = Signal(signed(6), name="q1")
        self.q2, self.q3 = Signal(8, name="q2"), Signal(4, name="q3")
        self.ports = [self.sync.clk, self.sync.rst, self.en, self.d, self.q1, self.q2, self.q3]

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = self.sync
        r1 = Signal(signed(6), init=-5)
        r2 = Signal(8, init=0xa5)
        r3 = Signal(4, init=9)
        with m.If(self.en):
            m.d.sync += r1.eq(self.d)
            with m.If(self.d[0]):
                m.d.sync += r3.eq(r3 - 1)
        m.d.sync += r2.eq(r2 + self.d)
        m.d.comb += [self.q1.eq(r1), self.q2.eq(r2), self.q3.eq(r3)]
        return m


@pytest.mark.parametrize("async_reset", [False, True])
def test_amaranth_registers(async_reset, tmp_path):
    registers = _Registers(async_reset)
    design = check_design(registers, tmp_path, ports=registers.ports, cycles=96)
    kinds = {cell.type for cell in design.cells}
    assert ("$adff" in kinds) == async_reset


class _Memory(Elaboratable):
    """A memory with initial contents, write ports and sync (transparent or not) and async
    read ports, every port field an input or output of the design."""

    def __init__(self, *, width, depth, init, granularity=None, write_ports=1,
                 read_ports=("transparent", "old", "async")):
        self.width, self.depth, self.init = width, depth, init
        self.granularity, self.read_ports = granularity, read_ports
        abits = ceil_log2(depth)
        lanes = width // granularity if granularity else 1
        self.writes = [(Signal(abits, name=f"wa{j}"), Signal(width, name=f"wd{j}"),
                        Signal(lanes, name=f"we{j}")) for j in range(write_ports)]
        self.reads = [(Signal(abits, name=f"ra{i}"), Signal(width, name=f"rd{i}"),
                       Signal(name=f"re{i}")) for i in range(len(read_ports))]
        self.ports = [signal for port in self.writes for signal in port]
        self.ports += [signal for port, kind in zip(self.reads, read_ports)
                       for signal in (port if kind != "async" else port[:2])]

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = memory.Memory(shape=self.width, depth=self.depth,
                                               init=self.init)
        writes = []
        for addr, data, en in self.writes:
            wp = mem.write_port(granularity=self.granularity)
            m.d.comb += [wp.addr.eq(addr), wp.data.eq(data), wp.en.eq(en)]
            writes.append(wp)
        for (addr, data, en), kind in zip(self.reads, self.read_ports):
            if kind == "async":
                rp = mem.read_port(domain="comb")
            else:
                rp = mem.read_port(transparent_for=writes if kind == "transparent" else ())
                m.d.comb += rp.en.eq(en)
            m.d.comb += [rp.addr.eq(addr), data.eq(rp.data)]
        return m


MEMORIES = {
    "granular": dict(width=8, depth=10, init=[3, 1, 4, 1, 5, 9, 2, 6], granularity=4),
    "two_writers": dict(width=5, depth=16, init=[31, 0, 17], write_ports=2,
                        read_ports=("transparent", "old")),
    "rom": dict(width=12, depth=37, init=list(range(100, 137)), write_ports=0,
                read_ports=("old", "async")),
    "wide_rom": dict(width=67, depth=300, init=[(i * 0x9E3779B97F4A7C15) % (1 << 67)
                                                for i in range(290)],
                     write_ports=0, read_ports=("old",)),
}


@pytest.mark.parametrize("kind", sorted(MEMORIES))
def test_amaranth_memory(kind, tmp_path):
    mem = _Memory(**MEMORIES[kind])
    def no_write_collision(values):
        # Amaranth gives write ports no priority: a collision's result is undefined.
        if values.get("we1") and values["we0"] and values["wa0"] == values["wa1"]:
            values["we1"] = 0
    design = check_design(mem, tmp_path, ports=mem.ports, cycles=160, adjust=no_write_collision,
                          max_x_fraction=0.5)   # reads of words not yet written are x in the Verilog
    assert "$mem_v2" in {cell.type for cell in design.cells}


# --- The public API: convert() against verilog.convert(), clean GHDL analysis -----------

class _Mixed(wiring.Component):
    """A little of everything: muxes, registers, arithmetic and a memory."""
    sel: In(4)
    x: In(8)
    y: Out(8)
    z: Out(8)
    q: Out(signed(10))
    rd: Out(8)

    def elaborate(self, platform):
        m = Module()
        m.submodules.switches = switches = _Switches()
        m.submodules.mem = mem = memory.Memory(shape=8, depth=12, init=[1, 2, 3])
        wp, rp = mem.write_port(), mem.read_port(transparent_for=())
        acc = Signal(signed(10), init=-3)
        m.d.sync += acc.eq(acc + self.x.as_signed())
        m.d.comb += [switches.sel.eq(self.sel), switches.x.eq(self.x), self.y.eq(switches.y),
                     self.z.eq(switches.z), self.q.eq(acc), wp.addr.eq(self.x), wp.data.eq(acc),
                     wp.en.eq(self.sel[3]), rp.addr.eq(self.sel), self.rd.eq(rp.data)]
        return m


def test_convert_matches_verilog_convert(tmp_path):
    require_tools("ghdl", "iverilog")
    vhdl_text = convert(_Mixed(), name="mixed")
    verilog_text = verilog.convert(_Mixed(), name="mixed")
    ports = ports_of(netlist.from_elaboratable(_Mixed(), name="mixed"))
    # Same ports, in the same order, as the Verilog module.
    header = re.search(r"^module mixed\((.*)\);$", verilog_text, re.M).group(1)
    assert [port.name for port in ports] == header.split(", ")
    assert "    sel : in std_logic_vector(3 downto 0)" in vhdl_text
    assert "    clk : in std_logic;" in vhdl_text
    stimulus = random_stimulus(ports, 128, random.Random(5))
    compare(ports, stimulus, *simulate(vhdl_text, verilog_text, ports, stimulus, tmp_path,
                                       top="mixed"), max_x_fraction=0.2)   # its memory's unwritten words


def test_ghdl_analyses_without_warnings(tmp_path):
    require_tools("ghdl")
    (tmp_path / "mixed.vhd").write_text(convert(_Mixed(), name="mixed"))
    for args in (["-a", "--std=08", "mixed.vhd"], ["-e", "--std=08", "mixed"]):
        result = subprocess.run(["ghdl", *args], cwd=tmp_path, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        assert result.stderr == "" and result.stdout == ""


def test_netlist_cell_types():
    kinds = netlist_cell_types(_Mixed(), name="mixed")
    assert {"$pmux", "$dff", "$mem_v2", "$add"} <= kinds <= SUPPORTED_CELLS


# --- Clear errors for what is not supported ------------------------------------------

def test_unknown_cell_type():
    rtlil_text = "\n".join([
        "attribute \\top 1", "module \\top",
        "  wire width 2 input 1 \\a", "  wire width 1 output 2 \\y",
        '  attribute \\src "design.py:12"',
        "  cell $lut \\lut0",
        "    parameter \\WIDTH 2", "    parameter \\LUT 4'0110",
        "    connect \\A \\a", "    connect \\Y \\y",
        "  end", "end", ""])
    with pytest.raises(UnsupportedCellError, match=(
            r"^VHDL back end does not support cell \$lut \(lut0\) at design\.py:12: "
            r"no VHDL translation for this cell type$")):
        emit.emit_vhdl(netlist.from_rtlil(rtlil_text, "top"), "top")


class _Printer(wiring.Component):
    a: In(4)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += Print("a =", self.a)
        return m


def test_print_is_unsupported():
    with pytest.raises(UnsupportedCellError,
                       match=r"^VHDL back end does not support cell \$print \(\S+\) at "
                             r".*test_vhdl_backend\.py:\d+: no VHDL translation"):
        convert(_Printer())


def test_async_memory_write_is_unsupported():
    mem = _Memory(**MEMORIES["granular"])
    design = netlist.from_elaboratable(mem, ports=mem.ports)
    cell, = [cell for cell in design.cells if cell.type == "$mem_v2"]
    cell.parameters["WR_CLK_ENABLE"] = "0"
    with pytest.raises(UnsupportedCellError,
                       match=r"^VHDL back end does not support cell \$mem_v2 \(mem\) at .*: "
                             r"write ports must be synchronous$"):
        emit.emit_vhdl(design, "top")


def test_port_name_must_be_vhdl_identifier():
    a, y = Signal(4, name="a__payload"), Signal(4, name="y")
    m = Module()
    m.d.comb += y.eq(a)
    with pytest.raises(ValueError, match=r"^Name must be a legal VHDL basic identifier, "
                                         r"not 'a__payload'$"):
        convert(m, ports=[a, y])


def test_entity_name_must_be_vhdl_identifier():
    with pytest.raises(ValueError, match=r"^Name must be a legal VHDL basic identifier, "
                                         r"not 'entity'$"):
        convert(_Mixed(), name="entity")


class _BigRom(wiring.Component):
    """The size of the accelerator's weight ROMs: 6,000 words of 512 bits."""
    addr: In(13)
    data: Out(512)

    def __init__(self, init):
        self.init = init
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.rom = rom = memory.Memory(shape=512, depth=len(self.init), init=self.init)
        port = rom.read_port()
        m.d.comb += [port.addr.eq(self.addr), self.data.eq(port.data)]
        return m


@pytest.mark.slow
def test_big_rom_converts_in_seconds():
    rng = random.Random(7)
    init = [rng.getrandbits(512) for _ in range(6000)]
    start = time.monotonic()
    text = convert(_BigRom(init))
    elapsed = time.monotonic() - start
    assert elapsed < 60, f"conversion took {elapsed:.1f} s"
    assert f'x"{init[0]:0128X}",\n    x"{init[1]:0128X}",' in text
    assert f'x"{init[5999]:0128X}")' in text


class _Chain(wiring.Component):
    """``y = ((a * b) + c) ^ d`` registered into ``q``: the product and the sum are unnamed
    wires read once (variables of one process); the exclusive or, read by a port and a
    register, is a signal."""
    a: In(signed(6))
    b: In(signed(7))
    c: In(12)
    d: In(12)
    y: Out(12)
    q: Out(12)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.y.eq(((self.a * self.b) + self.c) ^ self.d)
        m.d.sync += self.q.eq(self.y)
        return m


def test_single_reader_cells_become_variables_of_one_process(tmp_path):
    text = convert(_Chain(), name="top")
    assert text.count("process (all)") == 1
    assert re.search(r"^    variable mul_\w+ : bit_vector\(", text, re.M)
    assert re.search(r"^    variable add_\w+ : bit_vector\(", text, re.M)
    assert re.search(r"^  signal xor_\w+ : bit_vector\(", text, re.M)
    # The 6x7-bit product is an integer multiplication, not numeric_bit's loop of additions.
    assert "to_integer(signed(" in text and "mod 2 ** " in text
    check_design(_Chain(), tmp_path, cycles=64, seed=3)


def test_flip_flops_of_one_clock_share_a_process():
    text = convert(_Chain(), name="top")
    assert text.count("rising_edge(clk)") == 1 and "-- the 1 flip-flops of rising edges of clk" in text


class _RomAndRam(wiring.Component):
    """A ROM read synchronously and a RAM read on its write clock: neither needs a signal."""
    addr: In(3)
    data: In(8)
    we: In(1)
    rom_q: Out(8)
    ram_q: Out(8)

    def elaborate(self, platform):
        m = Module()
        m.submodules.rom = rom = memory.Memory(shape=8, depth=8, init=[3, 1, 4, 1, 5, 9, 2, 6])
        m.submodules.ram = ram = memory.Memory(shape=8, depth=8, init=[])
        rom_read, ram_read, ram_write = rom.read_port(), ram.read_port(), ram.write_port()
        m.d.comb += [rom_read.addr.eq(self.addr), ram_read.addr.eq(self.addr), ram_write.addr.eq(self.addr),
                     ram_write.data.eq(self.data), ram_write.en.eq(self.we),
                     self.rom_q.eq(rom_read.data), self.ram_q.eq(ram_read.data)]
        return m


def test_rom_is_a_constant_and_ram_a_process_variable(tmp_path):
    text = convert(_RomAndRam(), name="top")
    assert re.search(r"^  constant rom\w* : \w+ := \(", text, re.M)
    assert re.search(r"^    variable ram\w* : \w+ := ", text, re.M)
    assert not re.search(r"^  signal \w+ : \w+_type", text, re.M)
    check_design(_RomAndRam(), tmp_path, cycles=64, seed=5, max_x_fraction=0.02)  # read registers start x
