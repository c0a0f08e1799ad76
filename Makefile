# Every target installs what it needs first (idempotent), then runs.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
PROFILE ?= cpu
PAPER   ?=
export PYTHONHASHSEED := 0

.PHONY: setup test exact book bench clean-book

setup: $(STAMP)
$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $@

test: setup  ## the test suite (includes smoke runs of every notebook and a book build)
	$(BIN)/python -m pytest -q

exact: setup  ## regenerate results/<paper>/exact.csv for all five papers
	$(BIN)/python -m vitmlp.exact

book: setup  ## build the HTML book from committed results (no training)
	$(BIN)/jupyter-book build book --quiet

clean-book:
	rm -rf book/_build
