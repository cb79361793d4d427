# Two commands: `make book` builds the site, `make test` checks everything. Both set up .venv:
# `make book` installs only what the site needs (requirements-book.txt) and fetches the site's
# JavaScript (MathJax, require.js, the widget manager) with npm, so that the pages need no host but
# their own; `make test` installs everything (requirements.txt, which includes the book's set).
# --no-compile: Python compiles a module when it is first imported; compiling all of PyTorch's
# files at install time doubled the time `make book` took to install.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
BOOK_STAMP := $(VENV)/.book-stamp
# Two labs at a time (pytest-xdist; each lab's cells stay together on one worker and kernel).
NBVAL  := --nbval notebooks --nbval-sanitize-with notebooks/nbval_sanitize.cfg --nbval-cell-timeout 300 \
	-n 2 --dist loadscope
ASSETS := _assets/third_party/versions.json
# Another CPU's code paths on this one, for the second nbval run: ATen's portable kernels instead
# of AVX2/AVX-512 ones (random draws, reductions and elementwise ops round differently), MKL's
# conditional-numerical-reproducibility path (matmuls), OpenBLAS's Haswell kernels (NumPy,
# Triton's interpreter) and one thread instead of one per core (reductions split differently).
# tests/test_portability.py checks that each still changes results here.
OTHER_CPU := ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE OPENBLAS_CORETYPE=Haswell \
	OMP_NUM_THREADS=1
# Colab's package versions (requirements-colab.txt) in an environment of their own.
COLAB_VENV  := $(VENV)/colab
COLAB_STAMP := $(COLAB_VENV)/.installed-stamp
# Triton 3.6 (Colab's GPU runtime's) beside the pinned CPU torch, for `triton36`.
T36_VENV  := $(VENV)/triton36
T36_REQS  := $(T36_VENV)/.requirements-stamp
T36_STAMP := $(T36_VENV)/.installed-stamp

.PHONY: install install-book assets book test lint unit nbval nbval-other-cpu colab site browser \
	notebooks figures clean classroom grade lms

$(BOOK_STAMP): requirements-book.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --no-compile -r requirements-book.txt -e .
	touch $(BOOK_STAMP)

$(STAMP): requirements.txt requirements-book.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --no-compile -r requirements.txt -e .
	touch $(BOOK_STAMP) $(STAMP)

$(COLAB_STAMP): requirements-colab.txt
	test -x $(COLAB_VENV)/bin/python || $(PYTHON) -m venv $(COLAB_VENV)
	$(COLAB_VENV)/bin/python -m pip install -q --no-compile -r requirements-colab.txt
	touch $(COLAB_STAMP)

install-book: $(BOOK_STAMP)

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
book: install-book assets
	$(BIN)/jupyter-book build . $(if $(shell find _assets package-lock.json -newer \
	  _build/html/index.html 2>/dev/null | head -n 1),--all)

# Two phases. First the set-up, three steps at a time (make -j3): the main install, the Colab
# environment, Triton 3.6's packages and the npm assets side by side, then the site build (after
# the install and the assets) and Triton 3.6's `pip install -e .` (after the main install's: two
# editable builds at once share src/). Each is mostly single-threaded; one after another they
# took 2:55 (install 65 s, Colab 35 s, Triton 3.6 28 s, assets 14 s, site 33 s). Then the
# stages, each using both cores, one after another.
# --output-sync (whole steps' output, not interleaved lines) only where make has it: GNU make 4.0
# and later; macOS ships 3.81.
OUTPUT_SYNC := $(if $(filter output-sync,$(.FEATURES)),--output-sync=target)
# The PDF is printed (and checked) beside the `colab` stage, which runs one lab at a time and
# leaves a core free.
test:
	$(MAKE) -j3 $(OUTPUT_SYNC) test-prepare
	$(MAKE) lint unit triton36 nbval nbval-other-cpu
	$(MAKE) -j2 $(OUTPUT_SYNC) colab test-pdf
	$(MAKE) browser

.PHONY: test-prepare test-site test-pdf
test-prepare: test-site $(COLAB_STAMP) $(T36_STAMP)

# `site` for `make test`: the full install (not install-book, whose pip would run beside it).
test-site: install assets
	$(SITE_BUILD)

# `pdf` for `make test`, after the site build, whose doctrees it reuses; --quick: untagged and
# without bookmarks, which halves the printing; then tests/test_pdf.py checks it (not in `unit`).
test-pdf: install assets
	$(BIN)/python scripts/build_pdf.py --quick
	$(BIN)/python -m pytest -p no:cacheprovider tests/test_pdf.py

lint: install
	$(BIN)/ruff check .

# Two test files at a time (pytest-xdist; a file's tests and its module fixtures stay on one worker),
# in collection order, which tests/conftest.py starts with the longest files.
unit: install
	$(BIN)/python -m pytest tests -m "not browser and not colab" -n 2 --dist loadfile \
	  --no-loadscope-reorder --ignore=tests/test_pdf.py

nbval: install
	$(BIN)/python -m pytest $(NBVAL)

# The same comparison on another CPU's code paths: stored outputs must not depend on the CPU.
nbval-other-cpu: install
	$(OTHER_CPU) $(BIN)/python -m pytest $(NBVAL)

# Part VI under the Triton a Colab GPU runtime ships (3.6.0; requirements-triton36.txt) next to
# the pinned CPU torch: every launch compiled for sm75/80/90 and the interpreter tests of the
# kernels, as `unit` runs them under the pinned Triton (3.9).
T36_TESTS := tests/test_triton_compile.py tests/test_triton_attention.py tests/test_triton_io.py \
	tests/test_decoding_trace.py tests/test_optional_triton.py tests/test_gpu_triton36.py

$(T36_REQS): requirements-triton36.txt
	test -x $(T36_VENV)/bin/python || $(PYTHON) -m venv $(T36_VENV)
	$(T36_VENV)/bin/python -m pip install -q --no-compile -r requirements-triton36.txt
	touch $(T36_REQS)

# attnbook itself (and its dependencies) after the main install's: two editable builds at once
# share src/.
$(T36_STAMP): $(T36_REQS) $(STAMP) pyproject.toml
	$(T36_VENV)/bin/python -m pip install -q --no-compile -e .
	touch $(T36_STAMP)

.PHONY: triton36
triton36: install $(T36_STAMP)
	$(T36_VENV)/bin/python -m pytest -n 2 -p no:cacheprovider $(T36_TESTS)

# Every lab run as in Colab: from a folder outside the repository, attnbook from a built wheel,
# with Colab's own package versions (ipywidgets 7, its numpy and matplotlib, no Triton); one run.
colab: install $(COLAB_STAMP)
	$(BIN)/python -m pytest -s tests/test_colab_outside_repo.py

SITE_BUILD = $(BIN)/jupyter-book build . --all -W -n --keep-going
site: install-book assets
	$(SITE_BUILD)

# The book as one PDF, _build/pdf/attention-step-by-step.pdf (copied into _build/html, where the
# site links it): Jupyter Book's singlehtml builder, printed by Debian's Chromium through
# Playwright (scripts/build_pdf.py); incremental, like `book`.
.PHONY: pdf
pdf: install assets
	$(BIN)/python scripts/build_pdf.py

# Every toc page of _build/html in Chromium; screenshots and summary.json in _build/screenshots.
# The pages of both files are spread over two workers test by test (--dist load: one file per
# worker left one idle for half the stage); each worker writes a part of what it saw, and the
# second step merges the parts and checks the axe allowances against every page.
BROWSER_ALL := tests/test_site_browser.py::test_axe_allowances_are_all_needed
browser: install
	rm -rf _build/screenshots/parts
	$(BIN)/python -m pytest tests/test_site_browser.py tests/test_questions_browser.py -n 2 --dist load \
	  --deselect $(BROWSER_ALL)
	$(BIN)/python -m pytest -q $(BROWSER_ALL)
	@cat _build/screenshots/summary.json | head -12

# Authoring: re-execute every lab in place (stores outputs and widget state), redraw figures.
notebooks: install
	$(BIN)/python scripts/run_notebooks.py

figures: install
	$(BIN)/python scripts/make_figures.py

# Teaching: student and instructor editions of every lab and their Otter-Grader autograders
# (Gradescope zips with CPU torch and an attnbook wheel), in _build/classroom (scripts/classroom.py).
# RELEASE=2027-spring also freezes the term's editions and checks in scripts/grading/releases/.
classroom: install
	$(BIN)/python scripts/classroom.py $(if $(RELEASE),--release $(RELEASE))

# Grade hand-ins for marks (student folders or Canvas/Moodle/Gradescope downloads) into a new
# dated folder under _build/grades: gradebook.csv, exercises.csv, feedback/, summary.md.
# LABS=04_causal_mask,06_softmax names the assignment's labs (a missing one scores 0); JOBS=N.
grade: install
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade SUBMISSIONS=folder [LABS=04_causal_mask,...] [JOBS=N]"; exit 1; }
	$(BIN)/python scripts/grade.py "$(SUBMISSIONS)" $(if $(LABS),--labs $(LABS)) $(if $(JOBS),--jobs $(JOBS))

# The chapters' retrieval questions as Moodle XML, one file per chapter, in _build/lms/moodle
# (scripts/export_questions.py; import steps in book/course_guide.md).
lms: install-book
	$(BIN)/python scripts/export_questions.py --format moodle --out _build/lms

clean:
	rm -rf _build

# Everything a CUDA GPU can check (a Colab runtime included): the labs on the GPU, the compiled
# kernels against float64 and SDPA, the compile check, a timed benchmark; _build/gpu_check/report.md.
.PHONY: gpu-check
gpu-check: install
	$(BIN)/python scripts/gpu_check.py
