"""Hardware side: configuration, components, lowering and code generation.

Imports the integer IR (:mod:`pytorch_ref.ir`: ``QuantizedModel``, its layer types and
its file format) from :mod:`pytorch_ref` and nothing else, so it never imports torch.
The one exception is ``python -m hdl ... --model NAME``, which loads a shipped model
through :mod:`pytorch_ref.zoo` (torch) when it is asked for.
"""
