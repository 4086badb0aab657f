"""Signal widths derived from a compiled program (no magic numbers elsewhere)."""
from __future__ import annotations

from dataclasses import dataclass

from hdl.compiler.program import GemmOp, Program


def bits_for(value: int) -> int:
    """Unsigned bits needed to hold ``value`` (at least 1)."""
    return max(1, int(value).bit_length())


@dataclass(frozen=True)
class Widths:
    act_addr: int        # activation memory address
    act_element: int     # element (lane) offset within the activation memory
    weight_addr: int     # weight tile address (see weight_packing)
    param_addr: int      # parameter word address
    coord: int           # unsigned pixel coordinate / extent / kernel / stride / padding
    pixel: int           # pixel index within a tensor
    acc_addr: int        # accumulator address (pixel within a block)
    tile: int            # tile counters (channel tiles, n tiles, taps)

    @classmethod
    def of(cls, program: Program) -> "Widths":
        cfg = program.config
        coords, pixels, tiles = [1], [1], [1]
        for op in program.ops:
            for t in (op.source, op.dest):
                coords += [t.height, t.width, t.pixel_stride]
                pixels.append(t.pixels)
            coords += list(op.kernel) + list(op.stride) + list(op.padding)
            if isinstance(op, GemmOp):
                coords.append(op.taps_per_row)
                tiles += [op.channel_tiles, op.n_tiles, op.k_tiles, op.block]
        elements = max([program.activation_words * cfg.bank_width]
                       + [op.n_tiles * cfg.cols for op in program.gemm_ops])
        return cls(act_addr=bits_for(program.activation_words), act_element=bits_for(elements),
                   weight_addr=bits_for(max(op.weight_base + op.n_tiles * op.k_tiles - 1 for op in program.gemm_ops)),
                   param_addr=bits_for(max(1, len(program.bias))),
                   coord=bits_for(max(coords)) + 1,
                   pixel=bits_for(max(pixels)) + 1,
                   acc_addr=bits_for(cfg.accumulator_depth),
                   tile=bits_for(max(tiles)) + 1)
