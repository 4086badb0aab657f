"""Saving and loading a :class:`QuantizedModel` as one ``.npz`` file, with NumPy only.

The file is a NumPy ``.npz`` archive (a zip of ``.npy`` arrays, no pickle):

* ``header``: a string holding JSON -- ``{"format": "nnaccel-quantized-model",
  "version": 1, "name": ..., "input_shape": [...], "input_quant": {"scale": ...,
  "zero_point": ...}, "layers": [...]}``, one object per layer with its ``type``
  (``dense``, ``conv2d``, ``maxpool2d``, ``flatten``, ``add``, ``concat``), ``name`` and scalar fields
  (a weighted layer's ``weight_bits``; 8 where a file has none); and, for a model that
  is not a chain, ``"inputs"``: the tensors each layer reads (``QuantizedModel.inputs``);
* ``layers.<i>.weight``, ``layers.<i>.bias``, ``layers.<i>.multiplier``,
  ``layers.<i>.shift``: the arrays of weighted layer ``i``, in their own dtypes.

Floats go through JSON's shortest round-tripping form and arrays through ``.npy``, so
``load_model(save_model(m))`` is exactly ``m``. Loading a file that is not such a model,
or of another format version, raises :class:`ValueError` naming the file.
"""
from __future__ import annotations

import json
import os
import zipfile

import numpy as np

from pytorch_ref.ir.atomic_file import atomic_output
from pytorch_ref.ir.quantized_model import (AddLayer, ConcatLayer, Conv2dLayer, DenseLayer, FlattenLayer, MaxPool2dLayer,
                                            QuantizedModel, QuantParams, Requantization)

__all__ = ["FORMAT", "VERSION", "save_model", "load_model"]

FORMAT = "nnaccel-quantized-model"
VERSION = 1
_HEADER = "header"
_ARRAYS = ("weight", "bias", "multiplier", "shift")
_WEIGHTED_TYPES = {DenseLayer: "dense", Conv2dLayer: "conv2d"}


def _quant_to_json(q: QuantParams) -> dict:
    return {"scale": float(q.scale), "zero_point": int(q.zero_point)}


def _quant_from_json(d: dict) -> QuantParams:
    return QuantParams(float(d["scale"]), int(d["zero_point"]))


def _scalar_requant_to_json(rq: Requantization) -> dict:
    """A one-channel requantization (an add's, a concatenation input's)."""
    return {"multiplier": int(rq.multiplier[0]), "shift": int(rq.shift[0]), "zero_point": int(rq.zero_point),
            "clamp_min": int(rq.clamp_min), "clamp_max": int(rq.clamp_max)}


def _scalar_requant_from_json(d: dict) -> Requantization:
    return Requantization(np.array([int(d["multiplier"])], dtype=np.int64), np.array([int(d["shift"])], dtype=np.int64),
                          int(d["zero_point"]), int(d["clamp_min"]), int(d["clamp_max"]))


def _pair(values) -> tuple[int, int]:
    return tuple(int(v) for v in values)


def _layer_to_json(index: int, layer, arrays: dict) -> dict:
    if type(layer) in _WEIGHTED_TYPES:
        rq = layer.requant
        for key, value in zip(_ARRAYS, (layer.weight, layer.bias, rq.multiplier, rq.shift)):
            arrays[f"layers.{index}.{key}"] = np.asarray(value)
        entry = {"type": _WEIGHTED_TYPES[type(layer)], "name": layer.name, "weight_bits": int(layer.weight_bits),
                 "input_quant": _quant_to_json(layer.input_quant),
                 "output_quant": _quant_to_json(layer.output_quant),
                 "requant": {"zero_point": int(rq.zero_point), "clamp_min": int(rq.clamp_min),
                             "clamp_max": int(rq.clamp_max)}}
        if isinstance(layer, Conv2dLayer):
            entry.update(stride=list(_pair(layer.stride)), padding=list(_pair(layer.padding)),
                         groups=int(layer.groups))
        return entry
    if type(layer) is MaxPool2dLayer:
        return {"type": "maxpool2d", "name": layer.name, "kernel_size": list(_pair(layer.kernel_size)),
                "stride": list(_pair(layer.stride)), "padding": list(_pair(layer.padding))}
    if type(layer) is FlattenLayer:
        return {"type": "flatten", "name": layer.name}
    if type(layer) is AddLayer:
        return {"type": "add", "name": layer.name, "weights": [int(w) for w in layer.weights],
                "input_quants": [_quant_to_json(q) for q in layer.input_quants],
                "output_quant": _quant_to_json(layer.output_quant), "requant": _scalar_requant_to_json(layer.requant)}
    if type(layer) is ConcatLayer:
        return {"type": "concat", "name": layer.name, "input_quants": [_quant_to_json(q) for q in layer.input_quants],
                "output_quant": _quant_to_json(layer.output_quant),
                "requants": [_scalar_requant_to_json(rq) for rq in layer.requants]}
    raise TypeError(f"cannot save a layer of type {type(layer).__name__}")


def _layer_from_json(index: int, entry: dict, archive):
    kind = entry["type"]
    if kind in ("dense", "conv2d"):
        weight, bias, multiplier, shift = (archive[f"layers.{index}.{key}"] for key in _ARRAYS)
        rq = entry["requant"]
        common = dict(name=str(entry["name"]), weight=weight, bias=bias,
                      input_quant=_quant_from_json(entry["input_quant"]),
                      output_quant=_quant_from_json(entry["output_quant"]),
                      requant=Requantization(multiplier, shift, int(rq["zero_point"]),
                                             int(rq["clamp_min"]), int(rq["clamp_max"])),
                      weight_bits=entry.get("weight_bits", 8))
        if kind == "dense":
            return DenseLayer(**common)
        return Conv2dLayer(**common, stride=_pair(entry["stride"]), padding=_pair(entry["padding"]),
                           groups=int(entry["groups"]))
    if kind == "maxpool2d":
        return MaxPool2dLayer(str(entry["name"]), _pair(entry["kernel_size"]), _pair(entry["stride"]),
                              _pair(entry["padding"]))
    if kind == "flatten":
        return FlattenLayer(str(entry["name"]))
    if kind == "add":
        return AddLayer(str(entry["name"]), tuple(_quant_from_json(q) for q in entry["input_quants"]),
                        _quant_from_json(entry["output_quant"]), tuple(int(w) for w in entry["weights"]),
                        _scalar_requant_from_json(entry["requant"]))
    if kind == "concat":
        return ConcatLayer(str(entry["name"]), tuple(_quant_from_json(q) for q in entry["input_quants"]),
                           _quant_from_json(entry["output_quant"]),
                           tuple(_scalar_requant_from_json(rq) for rq in entry["requants"]))
    raise ValueError(f"unknown layer type {kind!r}")


def save_model(model: QuantizedModel, path: str | os.PathLike) -> None:
    """Write ``model`` to ``path`` (a ``.npz`` file; no suffix is added), creating its
    folder if needed.

    The file is written to a temporary file in the same folder, then renamed over
    ``path``, so a failure leaves no half-written file; its mode follows the umask.
    """
    arrays: dict[str, np.ndarray] = {}
    header = {"format": FORMAT, "version": VERSION, "name": model.name,
              "input_shape": [int(d) for d in model.input_shape],
              "input_quant": _quant_to_json(model.input_quant),
              "layers": [_layer_to_json(i, layer, arrays) for i, layer in enumerate(model.layers)]}
    if not model.is_chain:
        header["inputs"] = [list(reads) for reads in model.inputs]
    arrays[_HEADER] = np.array(json.dumps(header, allow_nan=False))
    with atomic_output(path, binary=True) as f:
        np.savez_compressed(f, **arrays)


def load_model(path: str | os.PathLike) -> QuantizedModel:
    """Read a model that :func:`save_model` wrote.

    Raises :class:`ValueError` (with ``path`` in the message) if the file is not such a
    model or is of an unsupported format version; :class:`OSError` if it cannot be read.
    """
    try:
        archive = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, zipfile.BadZipFile) as error:
        raise ValueError(f"{path}: not a saved quantized model (not a NumPy .npz file)") from error
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(f"{path}: not a saved quantized model (a single .npy array, not a .npz file)")
    with archive:
        try:
            header = json.loads(str(archive[_HEADER][()])) if _HEADER in archive.files else None
        except (ValueError, TypeError) as error:
            raise ValueError(f"{path}: not a saved quantized model (unreadable header)") from error
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise ValueError(f"{path}: not a saved quantized model (no {FORMAT!r} header)")
        version = header.get("version")
        if type(version) is not int or version != VERSION:
            raise ValueError(f"{path}: {FORMAT} version {version!r} is not supported "
                             f"(this program reads version {VERSION})")
        try:
            layers = tuple(_layer_from_json(i, entry, archive) for i, entry in enumerate(header["layers"]))
            return QuantizedModel(name=str(header["name"]),
                                  input_shape=tuple(int(d) for d in header["input_shape"]),
                                  input_quant=_quant_from_json(header["input_quant"]),
                                  layers=layers, inputs=header.get("inputs"))
        except (KeyError, TypeError, ValueError, zipfile.BadZipFile) as error:
            raise ValueError(f"{path}: damaged {FORMAT} file: {error}") from error
