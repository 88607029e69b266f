# Every target bootstraps its own virtual environment from pyproject.toml.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test test-slow test-all bench lint clean

# Two stamps: the demo needs only the package and its dependencies; the tests and lint need the
# test extras too (Playwright, psycopg, rotel, ...). Installing the extras also satisfies the demo.
BASE_STAMP := $(VENV)/.base-stamp

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(BASE_STAMP): pyproject.toml | $(BIN)/python
	@echo "Installing otel-lifecycle-hooks and its dependencies into $(VENV) (what the demo needs)"
	$(BIN)/python -m pip install --progress-bar on -e .
	touch $(BASE_STAMP)

$(STAMP): pyproject.toml | $(BIN)/python
	@echo "Installing otel-lifecycle-hooks with its test extras into $(VENV) (about a minute at first)"
	$(BIN)/python -m pip install --progress-bar on -e '.[test]'
	touch $(STAMP) $(BASE_STAMP)

demo: $(BASE_STAMP)
	$(BIN)/python examples/demo/run_demo.py

# The default tier (pyproject's addopts leave out tests marked `slow`), spread over
# TEST_WORKERS processes (pytest-xdist). Most tests wait on subprocesses and servers, so two
# cores keep four workers busy. Each file's tests run on one worker, sharing its fixtures,
# the files that took longest last time first (tests/support/file_order.py).
# `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 4
PARALLEL := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PARALLEL)

# Only the scale and soak tests marked `slow` (many supervisors, thousands of sessions).
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

test-all: test test-slow

# A wheel of this checkout in a clean venv under build/bench, every script from there, three
# interleaved rounds; judged on the medians. BENCH_ARGS passes more (`--runs 5`, `--only S`).
bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py $(BENCH_ARGS)

# ruff's rules, mypy --strict and the import layers: all configured in pyproject.toml.
LINTED := otel_lifecycle_hooks tests benchmarks examples

lint: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,dev]'
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy
	# The layers contract, once pyproject.toml holds one.
	if grep -q '^\[tool.importlinter\]' pyproject.toml; then $(BIN)/lint-imports; fi

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
