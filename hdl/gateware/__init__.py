"""Amaranth components of the accelerator, one concept per file; :mod:`.top` connects them."""
