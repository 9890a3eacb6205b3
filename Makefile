# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# Both create the virtual environment when it is missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.privsynth-installed
export OMP_NUM_THREADS ?= 1
export MKL_NUM_THREADS ?= 1

.PHONY: venv test test-all demo bench clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned: the CPU wheel of 2.13.0 lies on these machines; unpinned pip would fetch a CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -m "not slow" --timeout=600

test-all: $(STAMP)
	$(PY) -m pytest -q --timeout=3600

demo: $(STAMP)
	$(VENV)/bin/privsynth demo --out demo-output

clean:
	rm -rf demo-output .pytest_cache
