"""Models saved to a file, as the float front end takes them: an ``nn.Sequential`` chain,
or a ``torch.fx.GraphModule`` for a graph.

- :func:`load_exported`: a ``torch.export`` program (``torch.export.save``). Its ATen
  graph is read node by node: ``conv2d``, ``linear``, ``relu``, ``max_pool2d``,
  ``batch_norm`` (inference) and ``flatten`` / ``view`` / ``reshape`` to ``[N, -1]``, each
  rebuilt as the module it came from, with the program's own weights; ``add`` of two
  tensors and ``cat`` (residual connections, concatenations) as functions.
- :func:`load_torchscript`: a scripted chain (``torch.jit.script`` of an ``nn.Sequential``);
  its children keep their hyperparameters. A traced module (``torch.jit.trace``) keeps
  none, and is refused with a message that says what to do instead.

Anything else stops with the node's name, its target and the supported set.
"""
from __future__ import annotations

from pathlib import Path

import operator

import torch
from torch import fx, nn

_ATEN = torch.ops.aten
SUPPORTED_ATEN = ("conv1d", "conv2d", "linear", "relu", "hardtanh", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
                  "mean", "batch_norm", "flatten", "view", "reshape",
                  "dropout", "clone", "add", "cat")
SUPPORTED_SCRIPTED = ("Conv1d", "Conv2d", "Linear", "ReLU", "ReLU6", "Hardtanh", "MaxPool2d", "AvgPool2d",
                      "AdaptiveAvgPool2d", "BatchNorm2d", "Flatten",
                      "Dropout", "Identity")


def _pair(value) -> tuple[int, int]:
    value = list(value) if isinstance(value, (list, tuple)) else [value]
    return (value[0], value[-1])


def _arg(node, index: int, default):
    return node.args[index] if len(node.args) > index else default


def load_exported(path: str | Path) -> nn.Module:
    """The model of a ``torch.export`` program file: an ``nn.Sequential`` for a chain, a
    ``torch.fx.GraphModule`` for a graph."""
    program = torch.export.load(str(path))
    return model_from_exported(program)


def model_from_exported(program: torch.export.ExportedProgram) -> nn.Module:
    """The program's ATen graph as modules: each layer node rebuilt as the module it came
    from, with the program's own weights, and ``add`` (of two tensors) and ``cat`` as
    ``operator.add`` and ``torch.cat``. A chain comes back as an ``nn.Sequential``."""
    sig = program.graph_signature
    names = {**sig.inputs_to_parameters, **sig.inputs_to_buffers}
    names.update(getattr(sig, "inputs_to_lifted_tensor_constants", {}))
    state = program.state_dict
    constants = getattr(program, "constants", {})

    def tensor(node) -> torch.Tensor | None:
        if node is None:
            return None
        key = names.get(node.name)
        if key is None:
            raise ValueError(f"node {node.name}: expected a parameter or buffer of the program")
        return (state[key] if key in state else constants[key]).detach()

    graph, root, modules = fx.Graph(), nn.Module(), []
    value: dict = {}
    chain, previous = True, None

    def read(node, source):
        if not isinstance(source, fx.Node) or source not in value:
            raise ValueError(f"node {node.name} ({node.target}) reads {source!r}, which is not a tensor the model "
                             f"computes")
        return value[source]

    for node in program.graph.nodes:
        if node.op == "placeholder":
            if node.name not in names:
                value[node] = graph.placeholder(node.name)
                previous = node
            continue
        if node.op == "output":
            results = node.args[0]
            if not (isinstance(results, (tuple, list)) and len(results) == 1):
                raise ValueError(f"the program must return one tensor, not {results!r}")
            graph.output(read(node, results[0]))
            chain = chain and results[0] is previous
            break
        if node.op != "call_function":
            raise ValueError(f"node {node.name} ({node.op} {node.target}) is not supported; "
                             f"supported: {', '.join(SUPPORTED_ATEN)}")
        if node.target in (_ATEN.add.Tensor, _ATEN.add_.Tensor):
            if node.kwargs.get("alpha", 1) != 1 or len(node.args) != 2:
                raise ValueError(f"node {node.name}: only the plain sum of two tensors is supported")
            value[node] = graph.call_function(operator.add, tuple(read(node, a) for a in node.args))
            chain = False
        elif node.target in (_ATEN.cat.default, _ATEN.concat.default):
            value[node] = graph.call_function(torch.cat, ([read(node, t) for t in node.args[0]],),
                                              {"dim": _arg(node, 1, 0)})
            chain = False
        else:
            module = _aten_module(node, tensor)
            name = f"layer{len(modules)}"
            root.add_module(name, module)
            modules.append(module)
            value[node] = graph.call_module(name, (read(node, node.args[0]),))
            chain = chain and node.args[0] is previous
        previous = node
    if chain:
        return nn.Sequential(*modules).eval()
    return fx.GraphModule(root, graph).eval()


def _aten_module(node, tensor) -> nn.Module:
    target = node.target
    if target is _ATEN.conv2d.default:
        weight, bias = tensor(node.args[1]), tensor(_arg(node, 2, None))
        stride, padding = _pair(_arg(node, 3, 1)), _pair(_arg(node, 4, 0))
        dilation, groups = _pair(_arg(node, 5, 1)), _arg(node, 6, 1)
        out_c, in_per_group, kh, kw = weight.shape
        module = nn.Conv2d(in_per_group * groups, out_c, (kh, kw), stride, padding, dilation, groups,
                           bias=bias is not None)
        return _load(module, weight, bias)
    if target is _ATEN.conv1d.default:
        weight, bias = tensor(node.args[1]), tensor(_arg(node, 2, None))
        stride, padding, dilation = _arg(node, 3, [1]), _arg(node, 4, [0]), _arg(node, 5, [1])
        groups = _arg(node, 6, 1)
        out_c, in_per_group, k = weight.shape
        module = nn.Conv1d(in_per_group * groups, out_c, k, stride[0], padding[0], dilation[0], groups,
                           bias=bias is not None)
        return _load(module, weight, bias)
    if target is _ATEN.linear.default:
        weight, bias = tensor(node.args[1]), tensor(_arg(node, 2, None))
        return _load(nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None), weight, bias)
    if target in (_ATEN.relu.default, _ATEN.relu_.default):
        return nn.ReLU()
    if target in (_ATEN.hardtanh.default, _ATEN.hardtanh_.default):
        return nn.Hardtanh(float(_arg(node, 1, -1.0)), float(_arg(node, 2, 1.0)))
    if target in (_ATEN.dropout.default, _ATEN.clone.default):    # eval mode: the identity
        return nn.Identity()
    if target is _ATEN.max_pool2d.default:
        kernel = _pair(node.args[1])
        stride = _pair(_arg(node, 2, []) or kernel)
        return nn.MaxPool2d(kernel, stride, _pair(_arg(node, 3, 0)), _pair(_arg(node, 4, 1)), ceil_mode=_arg(node, 5, False))
    if target is _ATEN.avg_pool2d.default:
        kernel = _pair(node.args[1])
        stride = _pair(_arg(node, 2, []) or kernel)
        return nn.AvgPool2d(kernel, stride, _pair(_arg(node, 3, 0)), ceil_mode=_arg(node, 4, False),
                            count_include_pad=_arg(node, 5, True), divisor_override=_arg(node, 6, None))
    if target is _ATEN.adaptive_avg_pool2d.default:
        return nn.AdaptiveAvgPool2d(tuple(node.args[1]))
    if target is _ATEN.mean.dim:
        dims, keepdim = list(node.args[1]), _arg(node, 2, False)
        if sorted(d % 4 for d in dims) != [2, 3]:
            raise ValueError(f"node {node.name}: only a mean over height and width is supported, not dims {dims}")
        return nn.Sequential(nn.AdaptiveAvgPool2d(1), *([] if keepdim else [nn.Flatten()]))
    if target in (_ATEN.batch_norm.default, _ATEN._native_batch_norm_legit_no_training.default):
        if target is _ATEN.batch_norm.default and node.args[5]:
            raise ValueError(f"node {node.name}: batch_norm in training mode; export the model in eval mode")
        weight, bias = tensor(node.args[1]), tensor(node.args[2])
        mean, var = tensor(node.args[3]), tensor(node.args[4])
        eps = node.args[7] if target is _ATEN.batch_norm.default else node.args[6]
        module = nn.BatchNorm2d(len(mean), eps=eps)
        with torch.no_grad():
            module.weight.copy_(weight)
            module.bias.copy_(bias)
            module.running_mean.copy_(mean)
            module.running_var.copy_(var)
        return module
    if target is _ATEN.flatten.using_ints:
        start, end = _arg(node, 1, 0), _arg(node, 2, -1)
        if (start, end) != (1, -1):
            raise ValueError(f"node {node.name}: only flatten(x, 1) is supported, not flatten(x, {start}, {end})")
        return nn.Flatten()
    if target in (_ATEN.view.default, _ATEN.reshape.default):
        shape = list(node.args[1])
        if len(shape) != 2 or shape[1] != -1:
            raise ValueError(f"node {node.name}: only a reshape to [batch, -1] is supported, not {shape}")
        return nn.Flatten()
    raise ValueError(f"node {node.name} ({target}) is not supported; supported: {', '.join(SUPPORTED_ATEN)}")


def _load(module: nn.Module, weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Module:
    with torch.no_grad():
        module.weight.copy_(weight)
        if bias is not None:
            module.bias.copy_(bias)
    return module


def load_torchscript(path: str | Path) -> nn.Sequential:
    """The chain of a scripted ``nn.Sequential`` saved with ``torch.jit.save``."""
    scripted = torch.jit.load(str(path), map_location="cpu")
    layers = []
    for name, child in scripted.named_children():
        kind = getattr(child, "original_name", type(child).__name__)
        if kind not in SUPPORTED_SCRIPTED:
            raise ValueError(f"module {name} ({kind}) is not supported; supported: {', '.join(SUPPORTED_SCRIPTED)}")
        try:
            layers.append(_scripted_module(kind, child))
        except (AttributeError, RuntimeError):   # a traced child has no hyperparameters
            raise ValueError(f"module {name} ({kind}) keeps no hyperparameters: the file holds a traced module "
                             f"(torch.jit.trace); save a scripted one (torch.jit.script) or a torch.export "
                             f"program instead") from None
    if not layers:
        raise ValueError("the TorchScript module has no child modules: only a scripted nn.Sequential chain is supported")
    return nn.Sequential(*layers).eval()


def _scripted_module(kind: str, child) -> nn.Module:
    if kind == "Conv1d":
        module = nn.Conv1d(child.in_channels, child.out_channels, child.kernel_size, child.stride, child.padding,
                           child.dilation, child.groups, bias=child.bias is not None)
        return _load(module, child.weight, child.bias)
    if kind == "Conv2d":
        module = nn.Conv2d(child.in_channels, child.out_channels, child.kernel_size, child.stride, child.padding,
                           child.dilation, child.groups, bias=child.bias is not None)
        return _load(module, child.weight, child.bias)
    if kind == "Linear":
        weight = child.weight
        return _load(nn.Linear(weight.shape[1], weight.shape[0], bias=child.bias is not None), weight, child.bias)
    if kind == "ReLU":
        return nn.ReLU()
    if kind in ("ReLU6", "Hardtanh"):
        return nn.Hardtanh(float(child.min_val), float(child.max_val))
    if kind in ("Dropout", "Identity"):
        return nn.Identity()
    if kind == "AvgPool2d":
        return nn.AvgPool2d(child.kernel_size, child.stride, child.padding, ceil_mode=child.ceil_mode,
                            count_include_pad=child.count_include_pad, divisor_override=child.divisor_override)
    if kind == "AdaptiveAvgPool2d":
        return nn.AdaptiveAvgPool2d(child.output_size)
    if kind == "MaxPool2d":
        return nn.MaxPool2d(child.kernel_size, child.stride, child.padding, child.dilation, ceil_mode=child.ceil_mode)
    if kind == "BatchNorm2d":
        module = nn.BatchNorm2d(len(child.running_mean), eps=child.eps)
        with torch.no_grad():
            for attribute in ("weight", "bias", "running_mean", "running_var"):
                getattr(module, attribute).copy_(getattr(child, attribute))
        return module
    start, end = child.start_dim, child.end_dim
    if (start, end) != (1, -1):
        raise ValueError(f"only Flatten(1, -1) is supported, not Flatten({start}, {end})")
    return nn.Flatten()
