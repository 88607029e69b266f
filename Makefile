# Every target bootstraps its own virtual environment from pyproject.toml.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test bench lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo/run_demo.py

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

lint: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,dev]'
	$(BIN)/ruff check otel_lifecycle_hooks tests
	$(BIN)/mypy otel_lifecycle_hooks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
