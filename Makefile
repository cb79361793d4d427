# Two commands: `make book` builds the site, `make test` checks everything. Both set up .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
NBVAL  := --nbval notebooks --nbval-sanitize-with notebooks/nbval_sanitize.cfg

.PHONY: install book test lint unit nbval site notebooks figures clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -r requirements.txt -e .
	touch $(STAMP)

install: $(STAMP)

book: install
	$(BIN)/jupyter-book build .

test: install lint unit nbval site

lint: install
	$(BIN)/ruff check .

unit: install
	$(BIN)/python -m pytest tests

nbval: install
	$(BIN)/python -m pytest $(NBVAL)

site: install
	$(BIN)/jupyter-book build . --all -W -n --keep-going

# Authoring: re-execute every lab in place (stores outputs and widget state), redraw figures.
notebooks: install
	$(BIN)/python scripts/run_notebooks.py

figures: install
	$(BIN)/python scripts/make_figures.py

clean:
	rm -rf _build
