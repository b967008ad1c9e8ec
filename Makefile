# riftco: `make train` trains the tiny transformer, `make test` runs every check.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test test-deep test-pip-pocl train lint typecheck format bench bench-quick mac-check clean \
	conformance conformance-gpu $(CONFORMANCE_HOST) $(CONFORMANCE_GPU)

install: $(STAMP)

# setuptools notes on every editable install of a package-dir layout ("Editable installation.
# Please be careful with folders ... same name"); recent pip prints it as a warning.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install --quiet -e ".[test,plot]"
	$(BIN)/python .ci/links.py build/typecheck >/dev/null
	touch $(STAMP)

# pytest-xdist workers and parallel conformance passes: one per core, at most 4 (PoCL and
# BLAS already spread each process over the cores). TEST_WORKERS=1 runs in one process.
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(max(1, min(4, os.cpu_count() or 1)))")
PYTEST := $(BIN)/python -m pytest -q $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS))

test: $(STAMP)
	$(BIN)/python -m pip install --quiet ./examples/cffi_backend
	$(PYTEST)
	$(MAKE) --no-print-directory -j$(TEST_WORKERS) --output-sync=target conformance

# The digs too slow for every run (CI runs them too): 200 fuzz examples per (backend, op)
# instead of 20, and every mutant backend through every case its bug can reach (not only
# its op's cases; tests/conformance_trace.py) to prove that conformance blames no other op.
test-deep: $(STAMP)
	$(BIN)/python -m pip install --quiet ./examples/cffi_backend
	RIFTCO_FUZZ_EXAMPLES=200 RIFTCO_MUTANTS=all $(PYTEST) tests/ops/test_fuzz_ops.py tests/conformance/test_conformance_mutants.py

# What a newcomer without root gets: the OpenCL tests and conformance against the PoCL
# that pip installs (pyopencl[pocl]) alone. OCL_ICD_VENDORS names an empty folder, so the
# ICD loader finds no system-wide OpenCL (e.g. Debian's PoCL, which CI installs) and a
# newer system PoCL cannot hide a failure of the wheel's older LLVM; pyopencl's bundled
# loader still finds the wheel's own PoCL (through PYOPENCL_HOME).
PIP_POCL = OCL_ICD_VENDORS="$(CURDIR)/$(VENV)/no-system-opencl"
test-pip-pocl: $(STAMP)
	@mkdir -p $(VENV)/no-system-opencl
	@$(PIP_POCL) $(BIN)/riftco backends | grep "device opencl" || echo "no OpenCL device from the PoCL wheel"
	$(PIP_POCL) $(PYTEST) -m opencl
	$(PIP_POCL) $(MAKE) --no-print-directory -j$(TEST_WORKERS) --output-sync=target conformance-gpu

CONFORMANCE_HOST := conformance-cpu conformance-cffi_example conformance-native conformance-cuda
CONFORMANCE_GPU := conformance-opencl conformance-opencl-half conformance-opencl-fast96 \
	conformance-opencl-fast352 conformance-metal-standin conformance-metal-objc-fake \
	conformance-metal-objc-fake1024
conformance: $(CONFORMANCE_HOST) $(CONFORMANCE_GPU)
conformance-gpu: $(CONFORMANCE_GPU)

$(filter-out conformance-cuda,$(CONFORMANCE_HOST)): conformance-%: $(STAMP)
	$(BIN)/riftco conformance $* --quiet

# Every NVIDIA GPU the driver lists (cuda:N); elsewhere it skips, saying why (no driver,
# no GPU, no NVRTC). bench/gpu_check.sh is the fuller device check (smoke, speed).
HAVE_CUDA = $(BIN)/python -c "import sys, riftco; e = riftco.get_registry().entry('cuda'); \
	sys.exit(0 if e.available and e.devices() else (print('skipping $@:', e.reason) or 1))"
conformance-cuda: $(STAMP)
	@if $(HAVE_CUDA); then $(BIN)/riftco conformance cuda --quiet; fi

# The GPU kernels on OpenCL (PoCL runs them on a CPU): IEEE at the default group size in
# every dtype, and built with fast math (-cl-fast-relaxed-math -cl-finite-math-only, as Metal
# compiles) at the irregular group sizes Metal may pick, in float32 (Metal has no float64);
# then the Metal backend's host code through its OpenCL stand-in (fast math too). Each
# skips, saying why, where no OpenCL device can compile.
HAVE_OPENCL = $(BIN)/python -c "import sys, riftco; e = riftco.get_registry().entry('opencl'); \
	sys.exit(0 if e.available and e.devices() else (print('skipping $@:', e.reason) or 1))"
# float16 and bfloat16: every op on one IEEE device (core widens most through float32);
# elsewhere the ops the kernels run on half operands themselves (HALF_OPS: the memory
# methods, cast, elementwise, softmax, LayerNorm, cross-entropy, the linear backwards),
# once per math mode and runtime on its first device: fast math at group size 96, the
# stand-in, the objc fake at its per-pipeline sizes. The other group sizes and devices run
# float32 only: half storage changes loads and stores, not the row teams they exercise.
HALF_OPS := copy_strided,fill,cast,softmax,softmax_backward,neg,exp,log,sqrt,rsqrt,tanh,abs,add,sub,mul,div,maximum,minimum,compare,where,add_scalar,mul_scalar,pow_scalar,layer_norm,layer_norm_backward,add_layer_norm,add_layer_norm_backward,cross_entropy,cross_entropy_backward,linear_backward,linear_gelu_backward
HALF_RUN := --dtypes float16,bfloat16 --ops $(HALF_OPS) --quiet
# The float32 passes run on every OpenCL device (and every Metal fake device over them).
# CI names only the first: its second is the pip PoCL, which `test-pip-pocl` checks alone.
OPENCL_DEVICES ?= opencl
METAL_DEVICES ?= metal
conformance-opencl: $(STAMP)
	@if $(HAVE_OPENCL); then $(BIN)/riftco conformance $(OPENCL_DEVICES) --dtypes float32,float64 --quiet; fi
conformance-opencl-half: $(STAMP)
	@if $(HAVE_OPENCL); then $(BIN)/riftco conformance opencl:0 --dtypes float16,bfloat16 --quiet; fi
conformance-opencl-fast96: $(STAMP)
	@if $(HAVE_OPENCL); then export RIFTCO_FAST_MATH=1 RIFTCO_OPENCL_GROUP_SIZE=96; \
	  $(BIN)/riftco conformance $(OPENCL_DEVICES) --dtypes float32 --quiet && \
	  $(BIN)/riftco conformance opencl:0 $(HALF_RUN); fi
conformance-opencl-fast352: $(STAMP)
	@if $(HAVE_OPENCL); then export RIFTCO_FAST_MATH=1 RIFTCO_OPENCL_GROUP_SIZE=352; \
	  $(BIN)/riftco conformance $(OPENCL_DEVICES) --dtypes float32 --quiet; fi
conformance-metal-standin: $(STAMP)
	@if $(HAVE_OPENCL); then export RIFTCO_METAL_STANDIN=1 RIFTCO_METAL_RUNTIME=metalcompute; \
	  $(BIN)/riftco conformance $(METAL_DEVICES) --dtypes float32 --quiet && \
	  $(BIN)/riftco conformance metal:0 $(HALF_RUN); fi
# riftco's own Metal runtime (objc_runtime.py, the default) on the fake Objective-C runtime
# over OpenCL (objc_fake.py): as it compiles (safe math) at per-pipeline group sizes, and at
# group size 1024, what Metal reports for nearly every pipeline.
conformance-metal-objc-fake: $(STAMP)
	@if $(HAVE_OPENCL); then export RIFTCO_METAL_STANDIN=1 RIFTCO_METAL_RUNTIME=objc; \
	  $(BIN)/riftco conformance $(METAL_DEVICES) --dtypes float32 --quiet && \
	  $(BIN)/riftco conformance metal:0 $(HALF_RUN); fi
conformance-metal-objc-fake1024: $(STAMP)
	@if $(HAVE_OPENCL); then export RIFTCO_METAL_STANDIN=1 RIFTCO_METAL_RUNTIME=objc \
	  RIFTCO_STANDIN_GROUP_SIZE=1024; \
	  $(BIN)/riftco conformance $(METAL_DEVICES) --dtypes float32 --quiet; fi

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

# mypy over the installed layout: build/typecheck/riftco links the folders of pyproject's
# package-dir under the names they are imported by (.ci/links.py). Editors read the same
# tree (pyrightconfig.json); `make install` builds it too.
typecheck: $(STAMP)
	@$(BIN)/python .ci/links.py build/typecheck >/dev/null
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
