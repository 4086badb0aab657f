"""PyTorch side: model definitions, training, quantization and the integer reference.

Knows nothing of hardware. The integer semantics live in :mod:`.ir.integer_semantics`.
"""
