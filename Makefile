# streamdi — two commands on a fresh machine with Python 3.11+ and Java 17:
#   make run    install everything and run the main job on embedded defaults
#   make test   install everything and run lint, type checks and the tests
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.DEFAULT_GOAL := help
.PHONY: help install install-dev run test test-all lint format typecheck clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(VENV)/.python-ok:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || \
		{ echo "streamdi needs Python 3.11 or newer; set PYTHON=python3.11 (or newer)"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.python-ok
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.python-ok
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed ## install streamdi and its runtime dependencies into .venv

install-dev: $(VENV)/.installed-dev ## install streamdi with the development tools

# The TPC-DI run on a data set generated at SF (DIGen's volumes at 3); `make run SF=0.1` for a
# quick one. Real DIGen output: .venv/bin/streamdi tpcdi run --data DIR (see README).
SF ?= 3
run: install ## install everything and run the main job: the TPC-DI run (make run SF=3)
	$(BIN)/streamdi -q broker --fetch-only
	$(BIN)/streamdi tpcdi run --sf $(SF) --json reports/tpcdi-run.json --png reports/tpcdi-run.png

test: install-dev ## install everything; run ruff, the import contract, mypy and the tests (not the slow ones)
	$(BIN)/streamdi -q broker --fetch-only
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/pytest

test-all: install-dev ## the tests including the slow ones
	$(BIN)/streamdi -q broker --fetch-only
	$(BIN)/pytest -m ''

lint: install-dev ## ruff lint and format check; the import contract (pyproject.toml [tool.importlinter])
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: install-dev ## apply ruff's formatting and safe fixes
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: install-dev ## mypy --strict on the packages
	$(BIN)/mypy

clean: ## remove the virtual environment and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
