# The two set-up commands of the README are `make demo` (the main job) and `make test`
# (static checks, then the whole test suite). Both create or reuse the virtual environment.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: venv demo test check lint typecheck imports unit bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit("pi-workflows needs Python >= 3.11, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

demo: venv
	$(BIN)/python -m pi_workflows.cli.demo

LINT_PATHS := src tests examples $(wildcard bench)

lint: venv
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)

typecheck: venv
	$(BIN)/mypy

imports: venv
	$(BIN)/lint-imports

check: lint typecheck imports

unit: venv
	$(BIN)/pytest $(PYTEST_ARGS)

test: check unit

bench: venv
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .import_linter_cache
