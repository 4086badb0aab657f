"""Tools around the generated design: FPGA resource and clock estimates."""
