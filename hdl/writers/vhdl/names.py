"""Legal, unique VHDL identifiers for the names in a netlist."""

import re

__all__ = ["VHDL_RESERVED", "HELPER_PREFIX", "is_basic_identifier", "Namer"]


# IEEE 1076-2008 reserved words.
VHDL_RESERVED = frozenset("""
abs access after alias all and architecture array assert assume assume_guarantee attribute
begin block body buffer bus case component configuration constant context cover default
disconnect downto else elsif end entity exit fairness file for force function generate generic
group guarded if impure in inertial inout is label library linkage literal loop map mod nand new
next nor not null of on open or others out package parameter port postponed procedure process
property protected pure range record register reject release rem report restrict
restrict_guarantee return rol ror select sequence severity shared signal sla sll sra srl strong
subtype then to transport type unaffected units until use variable vmode vprop vunit wait when
while with xnor xor
""".split())

# Names the generated code uses from std/ieee; a signal of the same name would hide them.
_USED_LIBRARY_NAMES = frozenset("""
ieee std std_logic std_ulogic std_logic_vector std_ulogic_vector numeric_std numeric_bit std_logic_1164
to_bit to_bitvector to_stdulogic to_stdlogicvector
signed unsigned resize shift_left shift_right to_integer to_unsigned to_signed rising_edge
falling_edge natural integer positive boolean bit bit_vector string true false now
""".split())

# Prefix of the back end's own helper functions and types.
HELPER_PREFIX = "vh_"

_BASIC_IDENTIFIER = re.compile(r"[A-Za-z](_?[A-Za-z0-9])*")


def is_basic_identifier(name):
    """Whether ``name`` is a VHDL basic identifier that is not a reserved word."""
    return (_BASIC_IDENTIFIER.fullmatch(name) is not None
            and name.lower() not in VHDL_RESERVED)


def _sanitise(name):
    name = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")
    if not name:
        name = "n"
    if not name[0].isalpha():
        name = "n_" + name
    if name.lower().startswith(HELPER_PREFIX):
        name = "n_" + name
    if name.lower() in VHDL_RESERVED or name.lower() in _USED_LIBRARY_NAMES:
        name = name + "_n"
    return name


class Namer:
    """Hands out identifiers, unique without regard to case (VHDL ignores case)."""

    def __init__(self):
        self._taken = set(_USED_LIBRARY_NAMES)

    def reserve(self, name):
        """Claim ``name`` exactly (a port or the entity); it must be legal and free."""
        if not is_basic_identifier(name):
            raise ValueError(f"Name must be a legal VHDL basic identifier, not {name!r}")
        if name.lower().startswith(HELPER_PREFIX):
            raise ValueError(f"Name must not start with {HELPER_PREFIX!r}, not {name!r}")
        if name.lower() in self._taken:
            raise ValueError(f"Name must be unique without regard to case and must not be a "
                             f"std/ieee name the generated code uses, not {name!r}")
        self._taken.add(name.lower())
        return name

    def fresh(self, hint):
        """A new identifier derived from ``hint`` (any string)."""
        base = _sanitise(hint)
        name, suffix = base, 1
        while name.lower() in self._taken:
            suffix += 1
            name = f"{base}_{suffix}"
        self._taken.add(name.lower())
        return name
