"""The AXI system wrapper: register map, register file, stream framers and the top level."""
