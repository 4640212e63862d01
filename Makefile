# Synclane — `make up` runs it, `make test` tests it. See README.md.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: up test test-fast bench bench-quick lint format chromium clean

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

# `make up NODES=2`: two (up to 9) Celery workers, each a node of its own on loopback.
NODES ?= 1
up: $(STAMP)
	$(PY) -m controlplane.devstack up --nodes $(NODES)

test: $(STAMP) chromium
	$(PY) -m controlplane.devstack test

# The unit tier: no worker, torchrun, ASGI server or browser (see "Tests" in README.md), with
# fewer generated examples per property and fuzz test than `make test` runs.
test-fast: $(STAMP)
	SYNCLANE_FUZZ_EXAMPLES=25 SCHEDULING_EXAMPLES=20 \
	  $(PY) -m controlplane.devstack test -q -m "not integration and not dist and not browser"

bench: $(STAMP)
	@mkdir -p bench-results
	@for b in tests/benchmarks/bench_*.py; do echo "== $$b"; $(THROWAWAY_KEY) $(PY) $$b || exit 1; done

bench-quick: $(STAMP)
	@mkdir -p bench-results
	@for b in tests/benchmarks/bench_*.py; do echo "== $$b --quick"; $(THROWAWAY_KEY) $(PY) $$b --quick || exit 1; done

# Django refuses to start without a real SECRET_KEY outside DEBUG; checks and benchmarks (their
# own throwaway databases) get a throwaway one unless DJANGO_SECRET_KEY is set.
THROWAWAY_KEY = DJANGO_SECRET_KEY=$${DJANGO_SECRET_KEY:-$$($(PY) -c 'import secrets; print(secrets.token_urlsafe(50))')}

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(THROWAWAY_KEY) $(VENV)/bin/mypy controlplane workers
	$(THROWAWAY_KEY) $(VENV)/bin/mypy --strict controlplane/scheduling workers/runtime controlplane/bundles/archive.py
	$(THROWAWAY_KEY) $(PY) manage.py check
	$(THROWAWAY_KEY) $(PY) manage.py makemigrations --check --dry-run

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf run

# Refresh docs/screenshots/*.png: the live-dashboard browser tests, with a real run.
.PHONY: screenshots
screenshots: $(STAMP) chromium
	SYNCLANE_SCREENSHOTS=$(CURDIR)/docs/screenshots $(PY) -m controlplane.devstack test -m browser -q tests/browser/test_live_dashboard.py
