"""Weight precision per layer: which bit width each weighted layer's codes get.

A precision is given as

* ``None``: every layer at the default, :data:`~pytorch_ref.ir.integer_semantics.WEIGHT_BITS`;
* an ``int``: every weighted layer at that width;
* a mapping or a string ``"key=bits,key=bits"`` (or ``"4"``, as the int) whose keys are layer names (as in the
  :class:`~pytorch_ref.ir.quantized_model.QuantizedModel`, e.g. ``9.Linear``) or the
  selectors ``all``, ``conv`` and ``dense``. A layer takes the width of its name if given,
  else of its kind's selector, else of ``all``, else the default. For example
  ``"dense=4"`` keeps the convolutions at 8 bits and the dense layers at 4, and
  ``"all=4,9.Linear=2"`` puts one layer at 2 bits and the others at 4.

Every width is checked here, once, against the semantics' range, and a name that is not
a weighted layer of the model is an error listing the layers that are.
"""
from __future__ import annotations

from collections.abc import Mapping

from pytorch_ref.ir import integer_semantics as sem

__all__ = ["SELECTORS", "parse_weight_bits", "resolve_weight_bits"]

#: Keys that select a kind of layer rather than one layer, least specific first.
SELECTORS = ("all", "conv", "dense")

WeightBitsSpec = None | int | str | Mapping[str, int]

#: Command-line help of a ``--weight-bits`` option.
WEIGHT_BITS_HELP = ("weight widths, 2 to 8 bits: one width for all layers (e.g. 8), or 'key=bits,...' with "
                    "layer names or all/conv/dense (e.g. 'dense=4'); default: the model's own default")


def parse_weight_bits(spec: WeightBitsSpec) -> dict[str, int]:
    """``spec`` as a ``{key: bits}`` mapping (``None`` is empty; an int is ``{"all": n}``)."""
    if spec is None:
        return {}
    if isinstance(spec, bool):
        raise TypeError(f"weight bits must be an int, a string or a mapping, not {spec!r}")
    if isinstance(spec, int):
        return {"all": sem.check_weight_bits(spec, "all layers")}
    if isinstance(spec, str) and spec.strip().lstrip("-").isdigit():
        return parse_weight_bits(int(spec))
    if isinstance(spec, str):
        pairs = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            key, sep, value = item.partition("=")
            key, value = key.strip(), value.strip()
            if not sep or not key:
                raise ValueError(f"weight bits must be 'layer=bits' items separated by commas, not {item!r}")
            if key in pairs:
                raise ValueError(f"weight bits give {key!r} twice")
            try:
                pairs[key] = int(value)
            except ValueError:
                raise ValueError(f"{key}: weight bits must be an integer in [{sem.WEIGHT_BITS_MIN}, "
                                 f"{sem.WEIGHT_BITS_MAX}], not {value!r}") from None
        spec = pairs
    if not isinstance(spec, Mapping):
        raise TypeError(f"weight bits must be an int, a string or a mapping, not {type(spec).__name__}")
    return {str(key): sem.check_weight_bits(bits, str(key)) for key, bits in spec.items()}


def resolve_weight_bits(spec: WeightBitsSpec, layers: list[tuple[str, str]]) -> dict[str, int]:
    """The width of every weighted layer, from ``spec`` and the model's ``(name, kind)``
    pairs (``kind`` is ``"conv"`` or ``"dense"``)."""
    wanted = parse_weight_bits(spec)
    names = [name for name, _ in layers]
    unknown = [key for key in wanted if key not in SELECTORS and key not in names]
    if unknown:
        raise ValueError(f"weight bits name {', '.join(map(repr, unknown))}, which "
                         f"{'is not a weighted layer' if len(unknown) == 1 else 'are not weighted layers'} "
                         f"of the model; its weighted layers are {', '.join(names) or 'none'}, and the "
                         f"selectors are {', '.join(SELECTORS)}")
    return {name: wanted.get(name, wanted.get(kind, wanted.get("all", sem.WEIGHT_BITS))) for name, kind in layers}
