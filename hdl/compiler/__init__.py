"""Lowering: a :class:`QuantizedModel` to a :class:`Program` for the array, and the signal
widths the program needs."""
