# Two commands for a fresh machine (Python 3.11+; Node 20+ only for the optional cross-check):
#   make demo   - the main job on the embedded local stack (our Service Bus + Cosmos emulators)
#   make test   - the whole test suite (what CI runs)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CHECKOV_VENV := .venv-checkov
NODE_SERVER := emulators/cosmos/node_modules/.bin/cosmosdb-server

.PHONY: setup demo test lint clean node-crosscheck browser

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

# checkov pins old versions of common packages, so it lives in a venv of its own.
$(CHECKOV_VENV)/.installed:
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(CHECKOV_VENV)/bin/python -m pip install --quiet 'checkov>=3.2,<4'
	touch $@

# The third-party Cosmos wire server (cross-check only) and the JavaScript SDKs that test our
# emulators (tests/js); both skipped where Node is missing.
node-crosscheck:
	@if command -v npm >/dev/null 2>&1; then \
		(cd emulators/cosmos && npm ci --no-audit --no-fund --loglevel=error) && \
		(cd tests/js && npm ci --no-audit --no-fund --loglevel=error); \
	else echo "npm not found: the @vercel/cosmosdb-server cross-check and the JavaScript SDK tests will be skipped"; fi

# Headless Chromium and its driver for the console's browser tests (tests/browser): Debian's
# packages where apt works (as root, or through passwordless sudo); elsewhere, without a browser,
# the tests skip and say why (in CI they fail instead).
browser:
	@if command -v chromedriver >/dev/null 2>&1 && { command -v chromium || \
		command -v google-chrome; } >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1 && { [ "$$(id -u)" = 0 ] || sudo -n true 2>/dev/null; }; then \
		as_root=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
		echo "make browser: installing Debian's chromium and chromium-driver SYSTEM-WIDE" \
			"(apt-get install$${as_root:+ through $$as_root}) for the browser tests in" \
			"tests/browser; install them yourself beforehand to skip this step"; \
		$$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
			chromium chromium-driver >/dev/null 2>&1 || \
		{ $$as_root apt-get update >/dev/null && $$as_root env DEBIAN_FRONTEND=noninteractive \
			apt-get install -y --no-install-recommends chromium chromium-driver >/dev/null; } || \
		echo "could not install chromium: the browser tests will be skipped"; \
	else echo "chromium not found and apt-get unusable: the browser tests will be skipped"; fi

setup: $(BIN)/.installed

demo: $(BIN)/.installed
	$(BIN)/orders demo

# Lint first (seconds), then the suite on both cores, with branch coverage of the five packages
# (what runs in this process tree; emulators and workers started as processes are not counted).
# The slowest tests and the suite's wall time are printed last (tests/conftest.py).
test: lint $(CHECKOV_VENV)/.installed node-crosscheck browser
	$(BIN)/python -m pytest -n 2 --dist loadgroup --cov --cov-report=term --durations=15

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/mypy function_app.py scripts infra/scripts
	# The tests too, one folder at a time: each has its own conftest and helpers on the path.
	MYPYPATH=src:tests $(BIN)/mypy --explicit-package-bases tests/infra tests/*.py
	@for dir in unit http e2e integration core browser docs cosmos_emulator servicebus_emulator payments js; do \
		echo "mypy tests/$$dir"; \
		MYPYPATH=src:tests:tests/$$dir $(BIN)/mypy --explicit-package-bases tests/$$dir || exit 1; \
	done
	@if [ -x $(BIN)/actionlint ]; then $(BIN)/actionlint -no-color .github/workflows/*.yml; \
	elif command -v actionlint >/dev/null 2>&1; then actionlint -no-color .github/workflows/*.yml; \
	else echo "actionlint not found (no wheel for this platform): workflows not linted"; fi
	$(BIN)/lint-imports --no-cache

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) emulators/cosmos/node_modules tests/js/node_modules
