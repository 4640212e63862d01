# Synclane — `make up` runs it, `make test` tests it. See README.md.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: up test bench bench-quick lint format chromium clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# Browser tests drive Debian's Chromium (Playwright cannot download its own here).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is missing: run 'sudo apt-get install -y chromium'"; exit 1; fi; }

up: $(STAMP)
	$(PY) -m controlplane.devstack up

test: $(STAMP) chromium
	$(PY) -m controlplane.devstack test

bench: $(STAMP)
	@mkdir -p bench-results
	@for b in tests/benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

bench-quick: $(STAMP)
	@mkdir -p bench-results
	@for b in tests/benchmarks/bench_*.py; do echo "== $$b --quick"; $(PY) $$b --quick || exit 1; done

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --strict controlplane/scheduling workers/runtime
	$(PY) manage.py check
	$(PY) manage.py makemigrations --check --dry-run

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf run

# Refresh docs/screenshots/*.png: the live-dashboard browser tests, with a real run.
.PHONY: screenshots
screenshots: $(STAMP) chromium
	SYNCLANE_SCREENSHOTS=$(CURDIR)/docs/screenshots $(PY) -m controlplane.devstack test -m browser -q tests/browser/test_live_dashboard.py
