# gpulab course: `make lab` to learn, `make test` to check everything.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# cpu or gpu TensorFlow, chosen by whether an NVIDIA driver lists a GPU; override with TF_FLAVOUR=cpu|gpu
TF_FLAVOUR ?= $(shell if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then echo gpu; else echo cpu; fi)
REQS := requirements/course.txt requirements/tf-$(TF_FLAVOUR).txt requirements/addons.txt
# torch's CUDA build for this machine's NVIDIA driver (tools/torch_wheel.py): pip arguments that take
# the pinned torch from PyTorch's own index (e.g. cu126) when the driver or GPU cannot run PyPI's CUDA 13
# wheel; empty with R580+ and on machines without an NVIDIA driver. Override: TORCH_WHEEL=pypi|cu126|...
TORCH_WHEEL ?= auto
TORCH_ARGS := $(shell $(PYTHON) tools/torch_wheel.py --wheel $(TORCH_WHEEL) 2>/dev/null || echo no-torch-build)
# numba-cuda's CUDA libraries (NVVM, headers) on a GPU machine, matching the CUDA major of the torch build chosen
# above (cu12 for PyTorch's CUDA 12 builds, cu13 for PyPI's CUDA 13 wheel); none on a CPU machine, where lesson 11's
# @cuda.jit kernels run in Numba's simulator. Override: NUMBA_CUDA="numba-cuda[cu12]" (or empty).
NUMBA_CUDA ?= $(if $(filter gpu,$(TF_FLAVOUR)),numba-cuda[$(if $(findstring +cu12,$(TORCH_ARGS)),cu12,cu13)])
# A stale venv is found by the hash of what it was built from (and which checkout it serves), never by timestamps.
# The kernel's environment: log levels that keep TensorFlow and the PyTorch profiler quiet (gpulab.QUIET_ENV).
KERNEL_ENV := TF_CPP_MIN_LOG_LEVEL 3 TF_ENABLE_ONEDNN_OPTS 0 KINETO_LOG_LEVEL 6 PYTHONWARNINGS ignore::DeprecationWarning
# The course kernel, registered inside the venv as "python3" (the name Colab recognises), so the notebooks'
# kernelspec works on Colab and runs with KERNEL_ENV here.
KERNEL := python3
REQ_HASH := $(shell (cat $(REQS) pyproject.toml; echo "$(CURDIR) $(KERNEL) $(KERNEL_ENV)$(if $(TORCH_ARGS), $(TORCH_ARGS))$(if $(NUMBA_CUDA), $(NUMBA_CUDA))") | sha256sum | cut -c1-16)
STAMP := $(VENV)/.gpulab-installed-$(REQ_HASH)
# `make compat`: the unit tests against the oldest supported torch (requirements/compat.txt), in a second,
# lean venv (no TensorFlow/DALI/JupyterLab) that imports gpulab from this checkout.
COMPAT_VENV ?= .venv-compat
COMPAT_PY := $(COMPAT_VENV)/bin/python
COMPAT_HASH := $(shell cat requirements/compat.txt | sha256sum | cut -c1-16)
COMPAT_STAMP := $(COMPAT_VENV)/.gpulab-compat-$(COMPAT_HASH)
# `make dist` and `make docs`: a third, small venv with the build front end, pdoc and gpulab's core dependencies only
# (requirements/tools.txt; ~20 s to build), so the release files and the API reference never wait for the course stack.
TOOLS_VENV ?= .venv-tools
TOOLS_PY := $(TOOLS_VENV)/bin/python
TOOLS_HASH := $(shell cat requirements/tools.txt pyproject.toml | sha256sum | cut -c1-16)
TOOLS_STAMP := $(TOOLS_VENV)/.gpulab-tools-$(TOOLS_HASH)
LAB_PORT ?= 8888
# `make runs`: the folder gl.tracking logs runs to (its default is ./runs of the notebook kernel's working
# directory, or $GPULAB_RUNS), and the ports of the MLflow UI and TensorBoard (both on 127.0.0.1 only).
RUNS ?= runs
MLFLOW_PORT ?= 5000
TENSORBOARD_PORT ?= 6006
PYTEST_ARGS ?=
# Tests, kernels and the UI server import gpulab from this checkout, even when the (shared, cached)
# venv's editable install points at another clone.
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))

.PHONY: install lab test unit notebooks ui stress gpu-check doctor docs runs compat compat-unit compat-notebooks compat-install tools-install dist clean help

help:
	@echo "make lab   - install the course stack (first time: a few minutes) and start JupyterLab"
	@echo "make test  - install if needed, then unit tests, every notebook under nbval, and the UI suite"
	@echo "make gpu-check - the preflight before a class on this GPU: the GPU conformance tests and every notebook, report in build/gpu-check"
	@echo "make stress - the unit tests and every notebook again with one CPU core kept busy by another process"
	@echo "make docs  - the API reference from the docstrings, in build/docs"
	@echo "make runs  - the MLflow UI and TensorBoard on the runs gl.tracking logged in $(RUNS)/ (localhost; Ctrl-C stops both)"
	@echo "make compat - the unit tests against the oldest supported torch, in a second venv ($(COMPAT_VENV))"
	@echo "make dist  - build the wheel and the sdist into dist/"

install: $(STAMP)

$(STAMP):
	@$(PYTHON) tools/torch_wheel.py --wheel $(TORCH_WHEEL) --explain >/dev/null
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install -r requirements/course.txt -r requirements/addons.txt -r requirements/tf-$(TF_FLAVOUR).txt$(if $(TORCH_ARGS), $(TORCH_ARGS))$(if $(NUMBA_CUDA), "$(NUMBA_CUDA)") -e .
	$(PY) -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "Python 3 (gpulab)" \
	    $$(printf -- '--env %s %s ' $(KERNEL_ENV))
	$(PY) -m pip check
	@rm -f $(VENV)/.gpulab-installed-*
	@touch $@
	@echo "course stack ready in $(VENV) (TensorFlow: $(TF_FLAVOUR))"

# A fresh random token, handed to JupyterLab in its environment (JUPYTER_TOKEN, read by jupyter_server's
# IdentityProvider), never on its command line, where any local user could read it with `ps`; only the
# user sees it, in the address printed here.
lab: install
	@token=$$($(PY) -c 'import secrets; print(secrets.token_hex(24))'); \
	echo "JupyterLab: http://127.0.0.1:$(LAB_PORT)/lab?token=$$token"; \
	export JUPYTER_TOKEN=$$token; exec $(VENV)/bin/jupyter lab --ip=127.0.0.1 --port=$(LAB_PORT) --no-browser \
	    --ServerApp.root_dir=notebooks \
	    $$( [ "$$(id -u)" = 0 ] && echo --allow-root )

# Unit tests, then every notebook under nbval (assert cells are the checks), then every notebook
# through JupyterLab's UI in headless Chromium.
test: install
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory unit notebooks ui && \
	echo "make test: all suites passed in $$(( $$(date +%s) - start )) s"

unit: install
	$(PY) -m pytest $(PYTEST_ARGS) tests --ignore=tests/ui

# GPULAB_SOLUTIONS=1: the exercises' reference solutions run here (and in CI), never on a learner's Run All.
# CELL_TIMEOUT_S: nbval's guard against a hung cell (the heaviest cell takes ~65 s on an idle 2-core CPU).
CELL_TIMEOUT_S ?= 300
notebooks: install
	GPULAB_SOLUTIONS=1 $(PY) -m pytest $(PYTEST_ARGS) -p no:cacheprovider --nbval-lax --nbval-cell-timeout=$(CELL_TIMEOUT_S) --durations=0 notebooks

# The UI suite is the learner's Run All: no reference solutions, so every exercise must wait, not fail.
ui: install
	env -u GPULAB_SOLUTIONS $(PY) -m pytest $(PYTEST_ARGS) tests/ui

# The preflight a teacher runs on the GPU the learners will use (python -m gpulab check): the machine and stack, the
# ceilings beside the datasheet, the GPU conformance tests (tests/gpu, skipped without CUDA) and every notebook with
# the reference solutions on, each under a time limit; report.md and report.json in build/gpu-check/.
# JOBS=N runs N notebooks at once beside the tests (default: what the host fits); AS=native,t4 adds a T4 rehearsed on
# this GPU; GPU_CHECK_ARGS passes other options, e.g. GPU_CHECK_ARGS="--notebooks 08,11 --budget 600". A run on a GPU
# files its record in tests/gpu/runs: commit it.
JOBS ?=
AS ?=
GPU_CHECK_ARGS ?=
gpu-check: install
	$(PY) -m gpulab check $(if $(JOBS),--jobs $(JOBS)) $(if $(AS),--as $(AS)) $(GPU_CHECK_ARGS)

# The stress run: unit tests and notebooks with one core kept busy by a spinning process (tools/busy_core.py starts
# it, stops it at the end and never leaves it behind), as on a shared runner. STRESS_CORES sets how many.
# A busy core makes multi-threaded cells several times slower, so the hang guard is wider there; what must hold is
# every check's verdict.
STRESS_CORES ?= 1
stress: install
	$(PYTHON) tools/busy_core.py --cores $(STRESS_CORES) -- $(MAKE) --no-print-directory unit notebooks CELL_TIMEOUT_S=900

compat-install: $(COMPAT_STAMP)

$(COMPAT_STAMP):
	@test -x $(COMPAT_PY) || $(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_PY) -m pip install --quiet --upgrade pip
	$(COMPAT_PY) -m pip install --quiet -r requirements/compat.txt
	$(COMPAT_PY) -m pip check
	@rm -f $(COMPAT_VENV)/.gpulab-compat-*
	@touch $@
	@echo "compat stack ready in $(COMPAT_VENV) (torch $$($(COMPAT_PY) -c 'import torch; print(torch.__version__)'))"

# Tests that need what the compat venv leaves out (TensorFlow, DALI, MLflow, ONNX, JupyterLab) skip there; then every
# notebook runs under nbval on the floor (gpulab from the checkout), so the optional parts' skips and the version gates
# run for real.
compat: compat-unit compat-notebooks

compat-unit: compat-install
	$(COMPAT_PY) -m pytest $(PYTEST_ARGS) -p no:cacheprovider tests --ignore=tests/ui

compat-notebooks: compat-install
	PYTHONPATH=$(CURDIR) GPULAB_SOLUTIONS=1 $(COMPAT_PY) -m pytest $(PYTEST_ARGS) -p no:cacheprovider --nbval-lax --nbval-cell-timeout=$(CELL_TIMEOUT_S) --durations=0 notebooks

tools-install: $(TOOLS_STAMP)

$(TOOLS_STAMP):
	@test -x $(TOOLS_PY) || $(PYTHON) -m venv $(TOOLS_VENV)
	$(TOOLS_PY) -m pip install --quiet --upgrade pip
	$(TOOLS_PY) -m pip install --quiet -r requirements/tools.txt -e .
	$(TOOLS_PY) -m pip check
	@rm -f $(TOOLS_VENV)/.gpulab-tools-*
	@touch $@

# The API reference from the docstrings (pdoc): build/docs/index.html, the toolkit first and the course apart. It
# imports gpulab with its core dependencies only; the docstrings' examples run in `make unit`.
docs: tools-install
	$(TOOLS_PY) tools/docs.py build/docs

doctor: install
	$(PY) -m gpulab doctor

# Experiment tracking (lesson 12): MLflow's UI on the SQLite store $(RUNS)/mlflow.db and TensorBoard on
# $(RUNS)/tensorboard, as child processes stopped together on Ctrl-C.
runs: install
	$(PY) -m gpulab runs --root $(RUNS) --mlflow-port $(MLFLOW_PORT) --tensorboard-port $(TENSORBOARD_PORT)

# The release files: the sdist and, built from it, the wheel, in dist/ (python -m build: an isolated build with
# pyproject.toml's build requirements). `pip install dist/gpulab-*.whl` installs the library anywhere.
dist: tools-install
	rm -rf dist
	$(TOOLS_PY) -m build --outdir dist .
	@ls dist

clean:
	rm -rf build dist *.egg-info .pytest_cache artifacts
