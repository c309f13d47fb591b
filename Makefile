# streamdi — two commands on a fresh machine with Python 3.11+ and Java 17:
#   make run    install everything and run the main job on embedded defaults
#   make test   install everything and run lint, type checks and the tests
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.DEFAULT_GOAL := help
.PHONY: help install install-dev browser run test test-all lint format typecheck clean

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

# The console's browser tests drive Debian's chromium (never a browser a tool downloads). Installed
# here when it is missing and this is root with apt-get; otherwise this says why not and the
# browser tests skip with that reason. Quick when chromium is already there.
CHROMIUM ?= /usr/bin/chromium
browser: ## install Debian's chromium for the console's browser tests (as root with apt-get)
	@if [ -x "$(CHROMIUM)" ]; then \
		echo "browser: $(CHROMIUM) is installed"; \
	elif [ "$$(id -u)" != 0 ]; then \
		echo "browser: $(CHROMIUM) missing and not root: the console's browser tests will skip (apt-get install chromium)"; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
		echo "browser: $(CHROMIUM) missing and no apt-get: the console's browser tests will skip"; \
	else \
		echo "browser: installing Debian's chromium"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null 2>&1 || \
		{ apt-get update -qq >/dev/null 2>&1 && \
		  apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null 2>&1; } || \
		echo "browser: apt-get could not install chromium: the console's browser tests will skip"; \
	fi

# The tests run in this many worker processes (pytest-xdist), each test file's tests on one
# worker (a file's module fixtures, e.g. its Kafka broker, start once). In one process the suite
# keeps about one core busy (its CPU time ~ its wall time); two workers use both of our two.
# 0: in one process, as plain pytest does.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

# The TPC-DI run on a data set generated at SF (DIGen's volumes at 3); `make run SF=0.1` for a
# quick one. Real DIGen output: .venv/bin/streamdi tpcdi run --data DIR (see README).
SF ?= 3
run: install ## install everything and run the main job: the TPC-DI run (make run SF=3)
	$(BIN)/streamdi -q broker --fetch-only
	$(BIN)/streamdi tpcdi run --sf $(SF) --json reports/tpcdi-run.json --png reports/tpcdi-run.png

test: install-dev browser ## install everything; run ruff, the import contract, mypy and the tests (not the slow ones)
	$(BIN)/streamdi -q broker --fetch-only
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(PYTEST)

test-all: install-dev browser ## the tests including the slow ones
	$(BIN)/streamdi -q broker --fetch-only
	$(PYTEST) -m ''

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
