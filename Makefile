# The two commands of the README's Quickstart: `make demo` and `make test`.
# Both create the virtual environment and install memstream into it when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench

$(BIN)/.installed: pyproject.toml setup.py projector/graph/_native.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -U pip
	$(BIN)/python -m pip install -q -e '.[dev,openai,test]'
	touch $@

# The scripted multi-agent session on the embedded default (no servers).
demo: $(BIN)/.installed
	$(BIN)/memstream demo

# The whole suite, against the real Kafka broker and Redis that the stack command starts
# (and always stops again, keeping pytest's exit code): see scripts/test.sh.
test: $(BIN)/.installed
	bash scripts/test.sh

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(BIN)/.installed
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/memstream bench all
