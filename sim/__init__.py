"""Simulation: cocotb testbenches, stream driver and monitor, and the runner."""
