# tidegate: `make serve` runs the gateway, `make test` runs every check.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# llama.cpp built with native CPU flags dies with SIGILL on this machine kind (AMX in worker
# threads): build it portable. pip caches the wheel after the first (~10 min) build.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2
STAMP  := $(VENV)/.installed

.PHONY: serve test lint typecheck unit bench clean install screenshots

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip wheel

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[local,cloud,stores,otel,dev]'
	touch $(STAMP)

# the coding agents the tests drive (tests/coding_agents/package.json; docs/agents.md), by their lock file
AGENTS := tests/coding_agents
$(AGENTS)/node_modules/.package-lock.json: $(AGENTS)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then cd $(AGENTS) && npm ci --no-audit --no-fund --loglevel=error; \
	else echo "npm is not installed: the coding-agent tests will skip"; fi

# the console's chart library (package.json, pinned by its lock file): uPlot's built files, copied into
# the package (src/tidegate/console/vendor/, gitignored) so the console needs no network at run time
VENDOR := src/tidegate/console/vendor
$(VENDOR)/.installed: package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "npm is needed for the console's charts (apt-get install npm)"; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	mkdir -p $(VENDOR)
	cp node_modules/uplot/dist/uPlot.iife.min.js node_modules/uplot/dist/uPlot.min.css node_modules/uplot/LICENSE $(VENDOR)/
	touch $@

install: $(STAMP) $(VENDOR)/.installed $(AGENTS)/node_modules/.package-lock.json

# exec: the gateway is make's own child (no shell between them, whatever ARGS holds), so a signal
# make passes on reaches it, and make reports the gateway's exit status: 0 after a clean stop. On a
# terminal the gateway takes the foreground from make (cli/terminal.py): Ctrl-C reaches it alone,
# where make would otherwise die of the same SIGINT (130) whatever the gateway's exit.
# The CLI it installs is .venv/bin/tidegate (not on the PATH; README.md).
serve: $(STAMP) $(VENDOR)/.installed
	exec $(BIN)/tidegate serve $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests $(wildcard bench)
	$(BIN)/ruff format --check src tests $(wildcard bench)
	$(BIN)/mypy --strict src
	$(BIN)/lint-imports

# the in-process tests alone (no gateway subprocess, no coding agent): the quick loop while editing src/
unit: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit $(PYTEST_ARGS)

# run a second time with server/runtime/shortcuts.py switched off: the same bytes through uvicorn's own send
SHORTCUTS_OFF_TESTS := tests/integration/test_stream_faults.py tests/integration/test_openai_passthrough.py

test: $(STAMP) $(VENDOR)/.installed $(AGENTS)/node_modules/.package-lock.json lint
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)
	TIDEGATE_TEST_SHORTCUTS=off $(BIN)/python -m pytest -q -p no:cacheprovider $(SHORTCUTS_OFF_TESTS)

# the console's screenshots docs/console.md shows: the console tests, writing into docs/ (any other
# run writes them to a temporary directory: tests never change a tracked file)
screenshots: $(STAMP) $(VENDOR)/.installed
	TIDEGATE_SCREENSHOTS=$(CURDIR)/docs $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/integration/test_console.py tests/integration/test_console_pages.py

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info node_modules $(VENDOR)
