# Two commands: `make book` builds the site, `make test` checks everything. Both set up .venv,
# and `make book` also fetches the site's JavaScript (MathJax, require.js, the widget manager)
# with npm, so that the pages need no host but their own.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
NBVAL  := --nbval notebooks --nbval-sanitize-with notebooks/nbval_sanitize.cfg --nbval-cell-timeout 300
ASSETS := _assets/third_party/versions.json

.PHONY: install assets book test lint unit nbval colab site browser notebooks figures clean classroom grade

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -r requirements.txt -e .
	touch $(STAMP)

install: $(STAMP)

# Pinned in package.json / package-lock.json; copied into _assets/third_party (git-ignored),
# which _config.yml serves as _static/third_party. Without npm the site builds, but math and
# widgets need these files.
$(ASSETS): package.json package-lock.json scripts/vendor_assets.py
	@if command -v npm >/dev/null 2>&1; then \
	  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error && \
	  $(PYTHON) scripts/vendor_assets.py; \
	else \
	  echo "warning: npm not found: the site will lack MathJax and widgets (install Node.js)"; \
	fi

assets: $(ASSETS)

# Incremental, except after the site's JavaScript or CSS changed (pages then need rewriting).
book: install assets
	$(BIN)/jupyter-book build . $(if $(shell find _assets package-lock.json -newer \
	  _build/html/index.html 2>/dev/null | head -n 1),--all)

test: install lint unit nbval colab site browser

lint: install
	$(BIN)/ruff check .

unit: install
	$(BIN)/python -m pytest tests -m "not browser and not colab"

nbval: install
	$(BIN)/python -m pytest $(NBVAL)

# Every lab run as in Colab: from a folder outside the repository, attnbook from a built wheel.
colab: install
	$(BIN)/python -m pytest tests/test_colab_outside_repo.py

site: install assets
	$(BIN)/jupyter-book build . --all -W -n --keep-going

# Every toc page of _build/html in Chromium; screenshots and summary.json in _build/screenshots.
browser: install
	$(BIN)/python -m pytest tests/test_site_browser.py
	@cat _build/screenshots/summary.json | head -12

# Authoring: re-execute every lab in place (stores outputs and widget state), redraw figures.
notebooks: install
	$(BIN)/python scripts/run_notebooks.py

figures: install
	$(BIN)/python scripts/make_figures.py

# Teaching: student and instructor editions of every lab and their Otter-Grader autograders,
# in _build/classroom (scripts/classroom.py).
classroom: install
	$(BIN)/python scripts/classroom.py

# Grade handed-in labs offline, one folder per student: _build/grades/scores.csv, feedback.md.
grade: install
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade SUBMISSIONS=folder"; exit 1; }
	$(BIN)/python scripts/grade.py "$(SUBMISSIONS)"

clean:
	rm -rf _build
