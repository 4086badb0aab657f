"""A model and a configuration to the accelerator's top-level component."""
from hdl.compiler.program import Program, lower
from hdl.config import AcceleratorConfig
from hdl.gateware.axi.top import NeuralNetworkAcceleratorAxi, frame_shapes
from hdl.gateware.top import NeuralNetworkAccelerator

#: The on-chip memory a design may have unless the caller allows more (``allow_large``,
#: ``--allow-large``): 32 Mbit, nine times the block RAM of the largest ECP5. The time to
#: generate a design and the size of its HDL grow with its ROMs: about 9 bytes of Verilog
#: per byte of weights, and about a minute per 4 MB of weights.
MEMORY_LIMIT_BITS = 32 * 2 ** 20
VERILOG_BYTES_PER_MEMORY_BYTE = 9


def check_size(program: Program, allow_large: bool = False):
    """Stop, before any HDL is generated, a design whose memories exceed the limit."""
    bits = program.memory_bits
    total = sum(bits.values())
    if total > MEMORY_LIMIT_BITS and not allow_large:
        parts = ", ".join(f"{name} {value / 2 ** 20:.1f}" for name, value in bits.items())
        raise ValueError(f"{program.model_name}: the design needs {total / 2 ** 20:.1f} Mbit of on-chip memory "
                         f"({parts}), over the {MEMORY_LIMIT_BITS // 2 ** 20} Mbit limit; its Verilog would be "
                         f"about {total / 8 * VERILOG_BYTES_PER_MEMORY_BYTE / 1e6:.0f} MB. Allow it with "
                         f"allow_large=True (--allow-large on the command line)")


def build_top(model, config: AcceleratorConfig, allow_large: bool = False,
              axi_tdata_bits: tuple[int, int] | None = None) -> NeuralNetworkAccelerator | NeuralNetworkAcceleratorAxi:
    """Lower ``model`` (a :class:`QuantizedModel`) for ``config`` and build its top level,
    or with ``axi_tdata_bits`` (input and output TDATA widths) its AXI wrapper; raises
    ``ValueError`` if it does not fit ``config`` or exceeds :data:`MEMORY_LIMIT_BITS`."""
    program = lower(model, config)
    check_size(program, allow_large)
    if axi_tdata_bits is not None:
        frame_shapes(program, *axi_tdata_bits)       # a bad width raises before any component exists
        return NeuralNetworkAcceleratorAxi(program, *axi_tdata_bits)
    return NeuralNetworkAccelerator(program)
