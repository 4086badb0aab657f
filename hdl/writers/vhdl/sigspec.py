"""Bit lists (Yosys sigspecs) as VHDL expressions.

Every net bit is driven by exactly one VHDL object: a top-level input port or a signal that
holds a cell's output. :class:`Drivers` records which, and renders a list of bits as a
``bit_vector`` or ``bit`` expression, joining runs of bits into slices.

Inside the architecture every value is ``bit``/``bit_vector`` (with ``ieee.numeric_bit``),
not ``std_logic``: the netlist has no ``x`` or ``z`` to keep (both become 0), and two-valued
logic is what makes GHDL fast: its operators on ``bit`` are built in, where ``std_logic``'s
are calls into tables of nine values. The ports keep ``std_logic``; an input port is read
through ``to_bit``/``to_bitvector`` where it is used (no signal in between, so no delta
cycle that could reorder it against the clock), and outputs are converted once.
"""

__all__ = ["extend", "Drivers"]


def extend(bits, width, signed):
    """Truncate ``bits`` to ``width`` or extend them (sign-extend when ``signed``)."""
    if len(bits) >= width:
        return list(bits[:width])
    fill = bits[-1] if signed and bits else "0"
    return list(bits) + [fill] * (width - len(bits))


def _literal(chars):
    # `x` (don't care) becomes 0; `z` is refused by the emitter before rendering.
    return "".join("1" if char == "1" else "0" for char in chars)


class Drivers:
    """Which VHDL object drives each net bit, and how wide each object is."""

    def __init__(self):
        self._drivers = {}   # bit -> (name, index); index None for a scalar object
        self._widths = {}    # name -> width, None for a scalar
        self._ports = set()  # names of std_logic input ports (converted where read)

    def add(self, name, bits, *, scalar=False, port=False):
        self._widths[name] = None if scalar else len(bits)
        if port:
            self._ports.add(name)
        for index, bit in enumerate(bits):
            if isinstance(bit, int) and bit not in self._drivers:
                self._drivers[bit] = (name, None if scalar else index)

    def is_driven(self, bit):
        return not isinstance(bit, int) or bit in self._drivers

    def _runs(self, bits):
        """Runs of the bits, MSB first: ("const", chars) / ("ref", name, hi, lo) /
        ("rep", bit_expr, count)."""
        runs = []
        for bit in reversed(bits):
            if isinstance(bit, int) and bit in self._drivers:
                name, index = self._drivers[bit]
                last = runs[-1] if runs else None
                if (index is not None and last is not None and last[0] == "ref"
                        and last[1] == name and last[3] == index + 1):
                    runs[-1] = ("ref", name, last[2], index)
                else:
                    runs.append(("ref", name, index, index))
            else:
                # Undriven nets are `x` in Verilog; like `x` constants they become 0.
                char = bit if isinstance(bit, str) else "x"
                if runs and runs[-1][0] == "const":
                    runs[-1] = ("const", runs[-1][1] + char)
                else:
                    runs.append(("const", char))
        return self._merge_repeats(runs)

    @staticmethod
    def _merge_repeats(runs):
        merged = []
        for run in runs:
            if (run[0] == "ref" and run[2] == run[3] and merged
                    and merged[-1][0] in ("ref", "rep")):
                last = merged[-1]
                key = (run[1], run[2])
                if last[0] == "rep" and last[1] == key:
                    merged[-1] = ("rep", key, last[2] + 1)
                    continue
                if last[0] == "ref" and last[2] == last[3] and (last[1], last[2]) == key:
                    merged[-1] = ("rep", key, 2)
                    continue
            merged.append(run)
        return merged

    def _bit_name(self, name, index):
        ref = name if index is None else f"{name}({index})"
        return f"to_bit({ref})" if name in self._ports else ref

    def _slice(self, name, hi, lo):
        ref = name if hi is None else f"{name}({hi} downto {lo})"
        return f"to_bitvector({ref})" if name in self._ports else ref

    def bit(self, bit):
        """A ``bit`` expression for one bit."""
        if isinstance(bit, int) and bit in self._drivers:
            return self._bit_name(*self._drivers[bit])
        return f"'{_literal(bit if isinstance(bit, str) else 'x')}'"

    def signal(self, bit):
        """The name of the one-bit signal or port bit that holds ``bit``, as declared (a port
        stays ``std_logic``): for clock edges and sensitivity lists."""
        name, index = self._drivers[bit]
        return name if index is None else f"{name}({index})"

    def vec(self, bits):
        """A ``bit_vector`` expression for the bits (LSB first), usable anywhere,
        including as the operand of a type conversion."""
        if not bits:
            return 'bit_vector\'("")'
        parts = []
        runs = self._runs(bits)
        for run in runs:
            if run[0] == "const":
                parts.append(f'"{_literal(run[1])}"')
            elif run[0] == "rep":
                parts.append(f"({run[2] - 1} downto 0 => {self._bit_name(*run[1])})")
            else:
                _, name, hi, lo = run
                if hi is None or hi == lo:
                    parts.append(self._bit_name(name, hi))
                elif len(runs) == 1 and lo == 0 and self._widths[name] == hi + 1:
                    return self._slice(name, None, None)
                else:
                    parts.append(self._slice(name, hi, lo))
        if len(runs) == 1 and runs[0][0] == "ref" and runs[0][2] != runs[0][3]:
            return parts[0]
        if len(parts) == 1 and runs[0][0] == "rep":
            return f"bit_vector'{parts[0]}"
        if len(parts) == 1 and runs[0][0] == "ref":
            return f"bit_vector'(0 => {parts[0]})"
        # An aggregate inside `&` has no type of its own: qualify each one.
        parts = [f"bit_vector'{part}" if part.startswith("(") else part
                 for part in parts]
        return f"bit_vector'({' & '.join(parts)})"
