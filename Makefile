# loadmaster: `make demo` runs the main job on the built-in cluster and workload;
# `make test` runs the linters, the type checker, the layer contracts and the tests.
# Both create or reuse the virtualenv in $(VENV) and install what they need.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= out/demo

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.core: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(VENV)/.core $@

demo: $(VENV)/.core
	$(BIN)/loadmaster simulate --cluster lab --workload lab --out $(OUT)
	@echo "Open $(OUT)/report.html in a browser; PNG plots and job tables are beside it."

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint
	$(BIN)/pytest -q

bench: $(VENV)/.core
	$(BIN)/python benchmarks/sim_throughput.py

clean:
	rm -rf $(VENV) out .mypy_cache .ruff_cache .pytest_cache
