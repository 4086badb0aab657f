"""The integer IR: :class:`QuantizedModel`, its arithmetic (:mod:`.integer_semantics`) and
its file format (:mod:`.serialize`). NumPy only: the hardware path imports nothing else."""
