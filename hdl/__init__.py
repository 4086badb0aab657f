"""Hardware side: configuration, components, lowering and code generation.

Imports ``QuantizedModel`` (and its layer types) from :mod:`pytorch_ref` and nothing else.
"""
