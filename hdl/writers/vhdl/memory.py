"""``$mem_v2`` cells: an array (a constant for a ROM, a process variable for a RAM read on
its write clock only, else a signal) with its initial contents, and clocked processes.

The shape is the one synthesis tools infer block RAM from: ``type t is array (0 to N - 1) of
bit_vector(W - 1 downto 0)``, one clocked process that does all writes (in port order,
so a later port wins a collision, which satisfies every ``WR_PRIORITY_MASK`` Yosys allows)
and the synchronous reads of the same clock, and a concurrent assignment per asynchronous
read port. A synchronous read port returns the old word unless ``RD_TRANSPARENCY_MASK``
makes it transparent for a write port, in which case the bits that port writes to the same
address in the same cycle pass through. Reads outside the memory give 0 and such writes do
nothing (Yosys: undefined / no effect). Not supported (raises): wide ports, a non-zero
``OFFSET``, asynchronous write ports, write ports on different clocks, and read-port resets.
"""

from hdl.writers.vhdl.errors import UnsupportedCellError

__all__ = ["memory_outputs", "emit_memory"]


def _masks(cell, name, count):
    bits = cell.param_bits(name)
    return [bits[i] == "1" for i in range(count)]


def _ports(cell):
    return cell.param_int("RD_PORTS"), cell.param_int("WR_PORTS")


def _check(cell):
    rd_ports, wr_ports = _ports(cell)
    if cell.param_int("OFFSET") != 0:
        raise UnsupportedCellError(cell, "OFFSET must be 0")
    if cell.param_int("ABITS") > 30:
        raise UnsupportedCellError(cell, "ABITS must be at most 30")
    if any(_masks(cell, "RD_WIDE_CONTINUATION", rd_ports)) or \
            any(_masks(cell, "WR_WIDE_CONTINUATION", wr_ports)):
        raise UnsupportedCellError(cell, "wide ports are not supported")
    if wr_ports and not all(_masks(cell, "WR_CLK_ENABLE", wr_ports)):
        raise UnsupportedCellError(cell, "write ports must be synchronous")
    clocks = {(cell.connections["WR_CLK"][j], cell.param_bits("WR_CLK_POLARITY")[j])
              for j in range(wr_ports)}
    if len(clocks) > 1:
        raise UnsupportedCellError(cell, "write ports must share one clock")
    for i, sync in enumerate(_masks(cell, "RD_CLK_ENABLE", rd_ports)):
        if sync and (cell.connections["RD_ARST"][i] != "0" or cell.connections["RD_SRST"][i] != "0"):
            raise UnsupportedCellError(cell, "read ports must not have a reset")


def memory_outputs(cell):
    """(key, bits, init) of each read port's data signal; a synchronous port's register
    starts at ``RD_INIT_VALUE`` (Amaranth leaves it `x`: 0 here)."""
    _check(cell)
    width = cell.param_int("WIDTH")
    rd_ports, _ = _ports(cell)
    init = cell.param_bits("RD_INIT_VALUE")
    data = cell.connections["RD_DATA"]
    sync = _masks(cell, "RD_CLK_ENABLE", rd_ports)
    return [(f"RD_DATA{i}", data[i * width:(i + 1) * width],
             init[i * width:(i + 1) * width] if sync[i] else None)
            for i in range(rd_ports)]


def _word_literal(chars):
    chars = chars.replace("x", "0").replace("z", "0")
    if len(chars) % 4 == 0:
        return f'x"{int(chars, 2):0{len(chars) // 4}X}"'
    return f'"{chars}"'


def _init_aggregate(cell):
    width, size = cell.param_int("WIDTH"), cell.param_int("SIZE")
    raw = cell.parameters.get("INIT", "")  # MSB first: word 0 is at the end
    if isinstance(raw, int) or len(raw) != width * size:
        raw = "x" * (width * size)
    total = len(raw)
    words = [raw[total - (i + 1) * width:total - i * width] for i in range(size)]
    while words and set(words[-1]) <= {"0", "x", "z"}:
        words.pop()
    if not words:
        return "(others => (others => '0'))"
    literals = [_word_literal(word) for word in words]
    if len(literals) == 1:
        items = [f"0 => {literals[0]}"]
    else:
        items = literals
    if len(words) < size:
        items.append("others => (others => '0')")
    return "(\n    " + ",\n    ".join(items) + ")"


class _Memory:
    def __init__(self, cell, ctx):
        self.cell, self.ctx = cell, ctx
        self.width = cell.param_int("WIDTH")
        self.size = cell.param_int("SIZE")
        self.abits = cell.param_int("ABITS")
        self.rd_ports, self.wr_ports = _ports(cell)
        self.name = ctx.namer.fresh(cell.parameters.get("MEMID", cell.name).lstrip("\\"))

    def _slice(self, port, index, width):
        return self.cell.connections[port][index * width:(index + 1) * width]

    def addr(self, port, index):
        return self.ctx.vec(self._slice(port, index, self.abits))

    def in_range(self, addr):
        if self.size >= 2 ** self.abits:
            return None
        return f"unsigned({addr}) < {self.size}"

    def word(self, addr):
        return f"{self.name}(to_integer(unsigned({addr})))"

    def enable_groups(self, j):
        """(hi, lo, enable bit) runs of write port j's per-bit enables."""
        bits = self._slice("WR_EN", j, self.width)
        groups = []
        for i, bit in enumerate(bits):
            if groups and groups[-1][2] == bit:
                groups[-1][0] = i
            else:
                groups.append([i, i, bit])
        return groups

    def write_data(self, j, hi, lo):
        return self.ctx.vec(self._slice("WR_DATA", j, self.width)[lo:hi + 1])

    def merge_writes(self, j, target, addr_match, assign="<="):
        """Lines that apply write port j to ``target`` (a word-sized name) when it writes;
        ``assign`` is ``<=`` for a signal, ``:=`` for a variable."""
        lines = []
        for hi, lo, enable in self.enable_groups(j):
            if enable == "0" or enable == "x":
                continue
            part = target if (hi, lo) == (self.width - 1, 0) else f"{target}({hi} downto {lo})"
            line = f"{part} {assign} {self.write_data(j, hi, lo)};"
            if enable != "1":
                line = [f"if {self.ctx.bit(enable)} = '1' then", f"  {line}", "end if;"]
            lines.extend(line if isinstance(line, list) else [line])
        guards = [g for g in addr_match if g]
        if guards and lines:
            lines = [f"if {' and '.join(guards)} then", *["  " + l for l in lines], "end if;"]
        return lines

    def sync_read(self, i, transparent_for):
        cell, ctx = self.cell, self.ctx
        addr = self.addr("RD_ADDR", i)
        data = ctx.output(cell, f"RD_DATA{i}")
        guard = self.in_range(addr)
        lines = [f"vh_rd := {self.word(addr)};"]
        if guard:
            lines = [f"if {guard} then", f"  {lines[0]}", "else",
                     "  vh_rd := (others => '0');", "end if;"]
        for j in transparent_for:
            lines += self.merge_writes(j, "vh_rd", [f"{self.addr('WR_ADDR', j)} = {addr}"], ":=")
        lines.append(f"{data} <= vh_rd;")
        enable = cell.connections["RD_EN"][i]
        if enable != "1":
            lines = [f"if {ctx.bit(enable)} = '1' then", *["  " + l for l in lines], "end if;"]
        return lines

    def emit(self):
        cell, ctx = self.cell, self.ctx
        sync = _masks(cell, "RD_CLK_ENABLE", self.rd_ports)
        transparency = _masks(cell, "RD_TRANSPARENCY_MASK", self.rd_ports * self.wr_ports)
        groups = {}  # (clock bit, polarity) -> [read port indices]; write ports join theirs
        write_clock = None
        if self.wr_ports:
            write_clock = (cell.connections["WR_CLK"][0], cell.param_bits("WR_CLK_POLARITY")[0])
            groups[write_clock] = []
        for i in range(self.rd_ports):
            if sync[i]:
                key = (cell.connections["RD_CLK"][i], cell.param_bits("RD_CLK_POLARITY")[i])
                groups.setdefault(key, []).append(i)
        # A ROM is a constant. A RAM whose reads are all synchronous to its writes' clock is a
        # variable of the one process that reads and writes it. Only a RAM read elsewhere
        # (asynchronously, or on another clock) needs a signal: a simulator keeps a signal
        # of N words of W bits as N x W signals of one bit, each updated and traced.
        if not self.wr_ports:
            kind = "constant"
        elif all(sync) and len(groups) == 1:
            kind = "variable"
        else:
            kind = "signal"
        type_name = ctx.namer.fresh(self.name + "_type")
        ctx.declare(f"type {type_name} is array (0 to {self.size - 1}) of "
                    f"bit_vector({self.width - 1} downto 0);")
        declaration = f"{kind} {self.name} : {type_name} := {_init_aggregate(cell)};"
        if kind != "variable":
            ctx.declare(declaration)
        for i in range(self.rd_ports):
            if not sync[i]:
                addr = self.addr("RD_ADDR", i)
                guard = self.in_range(addr)
                value = self.word(addr)
                if guard:
                    value = f"{value} when {guard} else (others => '0')"
                ctx.statement([f"{ctx.output(cell, f'RD_DATA{i}')} <= {value};"])
        for (clock, polarity), reads in groups.items():
            body = []
            for i in reads:
                transparent = [j for j in range(self.wr_ports)
                               if transparency[i * self.wr_ports + j] and
                               (clock, polarity) == write_clock]
                body += self.sync_read(i, transparent)
            if (clock, polarity) == write_clock:
                for j in range(self.wr_ports):
                    addr = self.addr("WR_ADDR", j)
                    body += self.merge_writes(j, self.word(addr), [self.in_range(addr)],
                                              ":=" if kind == "variable" else "<=")
            edge = ctx.edge(clock, polarity == "1", cell)
            variables = [f"  variable vh_rd : bit_vector({self.width - 1} downto 0);"] if reads else []
            if kind == "variable":
                variables.insert(0, "  " + declaration)
            ctx.statement([f"process ({ctx.signal(clock)})", *variables, "begin",
                           f"  if {edge} then", *["    " + l for l in body], "  end if;",
                           "end process;"])


def emit_memory(cell, ctx):
    _Memory(cell, ctx).emit()
