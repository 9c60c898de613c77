# `make demo` and `make test` work on a fresh machine with Python >= 3.11 and pip:
# the first run makes a virtual environment in .venv and installs tilesafe into it.
# DEPS pin the stack CI tests (pyproject.toml's bounds allow the GPU machine's too);
# setuptools >= 77 builds the wheel that tests/test_packaging.py installs (without isolation).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEPS := torch==2.13.0 triton==3.6.0 "numpy<2.4" ml_dtypes hypothesis pytest pytest-xdist "setuptools>=77"
INSTALLED := $(VENV)/.tilesafe-installed

.PHONY: demo test install clean

demo: $(INSTALLED)
	$(BIN)/tilesafe demo

test: $(INSTALLED)
	$(BIN)/python -m pytest -n 2 -q

install: $(INSTALLED)

$(INSTALLED): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install $(DEPS)
	$(BIN)/python -m pip install -e .
	touch $@

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis
