# Every target installs what it needs first (idempotent), then runs.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
PROFILE ?= cpu
PAPER   ?=
export PYTHONHASHSEED := 0

CHAPTERS := three-things-vit mlp-mixer scaled-relu dual-patchnorm resmlp appendix
RUN      = $(BIN)/python -m vitmlp.run --profile $(PROFILE) $(if $(PAPER),--paper $(PAPER))

.PHONY: help setup test exact book check-book bench clean-book all $(CHAPTERS)

help:  ## this list
	@grep -E '^[A-Za-z%$$(). -]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 34
	@echo "chapters with notebooks: $$(ls notebooks | tr '\n' ' ')(the others are not started)"

setup: $(STAMP)
$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $@

test: setup  ## the test suite (includes smoke runs of every notebook and a book build), one worker a core (at most 4)
	$(BIN)/python -m pytest -q -n auto --maxprocesses 4 --dist worksteal

exact: setup  ## regenerate results/<paper>/exact.csv for all five papers
	$(BIN)/python -m vitmlp.exact

book: setup  ## build the HTML book from committed results (no training)
	$(BIN)/python -m vitmlp.book
	$(BIN)/jupyter-book build book --quiet
	@echo "book: $(CURDIR)/book/_build/html/index.html"

check-book: book  ## open every page of the built book in headless Chromium (apt: chromium chromium-driver)
	$(BIN)/python scripts/check_book.py book/_build/html

bench: setup  ## trainer throughput, share of matmul peak, eager vs compile vs bf16, data share
	$(BIN)/python -m vitmlp.bench --profile $(PROFILE)

all: setup  ## every notebook of every chapter at PROFILE (default cpu; cached runs are reused)
	$(RUN)

$(CHAPTERS): setup  ## one chapter: make resmlp [PROFILE=cpu]
	$(BIN)/python -m vitmlp.run --profile $(PROFILE) --paper $@

table% figure% appendix% algorithm% listing% theorem%: setup  ## one item: make table3 [PAPER=resmlp]
	$(RUN) --item $@

clean-book:
	rm -rf book/_build
