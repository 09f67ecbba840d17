# The two commands:  make reproduce   and   make test
# Each creates (or refreshes, when pyproject.toml changed) a local virtual
# environment in .venv, installs attnflow into it, then runs its job.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.attnflow-installed
OUT    ?= results/reproduce

.PHONY: install reproduce test bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

reproduce: $(STAMP)
	$(VENV)/bin/attnflow reproduce --out $(OUT)

test: $(STAMP)
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) results .pytest_cache
