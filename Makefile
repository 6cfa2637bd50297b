# The two commands a newcomer needs:
#   make demo   set up .venv and run the main job on the embedded default
#   make test   set up .venv and run the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test setup bench docs lint clean

$(BIN)/tenure: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(BIN)/tenure

setup: $(BIN)/tenure

demo: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/demo.sh

test: setup
	$(BIN)/python -m pytest -n 2 -q

bench: setup
	$(BIN)/python benchmarks/run.py
	$(BIN)/python benchmarks/projects_bench.py
	$(BIN)/python benchmarks/intake_bench.py

docs: setup
	$(BIN)/python -m tenure.cli.docs docs/machines

lint: setup
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .tenure build *.egg-info
