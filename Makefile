# riftco: `make train` trains the tiny transformer, `make test` runs every check.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test train lint typecheck format bench bench-quick conformance-gpu mac-check clean

install: $(STAMP)

# setuptools notes on every editable install of a package-dir layout ("Editable installation.
# Please be careful with folders ... same name"); recent pip prints it as a warning.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install --quiet -e ".[test,plot]"
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pip install --quiet ./examples/cffi_backend
	$(BIN)/python -m pytest -q
	$(BIN)/riftco conformance cpu --quiet
	$(BIN)/riftco conformance cffi_example --quiet
	$(BIN)/riftco conformance native --quiet
	$(MAKE) --no-print-directory conformance-gpu

# The GPU kernels on OpenCL (PoCL runs them on a CPU): IEEE at the default group size, and
# built with fast math (-cl-fast-relaxed-math -cl-finite-math-only, as Metal compiles) at the
# irregular group sizes Metal may pick; then the Metal backend's host code through its
# OpenCL stand-in (fast math too). Skips, saying why, where no OpenCL device can compile.
conformance-gpu: $(STAMP)
	@if $(BIN)/python -c "import sys, riftco; e = riftco.get_registry().entry('opencl'); \
	    sys.exit(0 if e.available and e.devices() else (print('skipping GPU conformance:', e.reason) or 1))"; then \
	  set -e; \
	  $(BIN)/riftco conformance opencl --quiet; \
	  RIFTCO_FAST_MATH=1 RIFTCO_OPENCL_GROUP_SIZE=96 $(BIN)/riftco conformance opencl --quiet; \
	  RIFTCO_FAST_MATH=1 RIFTCO_OPENCL_GROUP_SIZE=352 $(BIN)/riftco conformance opencl --quiet; \
	  RIFTCO_METAL_STANDIN=1 $(BIN)/riftco conformance metal --quiet; \
	fi

train: $(STAMP)
	$(BIN)/riftco train

# On a Mac: Metal conformance, a 300-step training run and a benchmark against native (and
# PyTorch MPS / MLX when installed), all in one folder plus a .zip to attach to an issue
# (docs/METAL.md). Elsewhere it runs on the stand-in:
#   RIFTCO_METAL_STANDIN=1 make mac-check MAC_CHECK_ARGS=--quick
mac-check: $(STAMP)
	$(BIN)/python bench/mac_check.py $(MAC_CHECK_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(MAKE) --no-print-directory typecheck

# mypy over the installed layout: build/typecheck/riftco links core/'s modules plus
# backends/, shaders/ and conformance/ under the names they are imported by.
typecheck: $(STAMP)
	@rm -rf build/typecheck && mkdir -p build/typecheck/riftco
	@for f in core/*; do ln -s "$(CURDIR)/$$f" build/typecheck/riftco/; done
	@for d in backends shaders conformance; do ln -s "$(CURDIR)/$$d" build/typecheck/riftco/$$d; done
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

bench-quick: $(STAMP)
	$(BIN)/python bench/run_all.py --quick

clean:
	rm -rf $(VENV) build *.egg-info
