# Strata: `make run` brings everything up; `make test` runs the whole suite; `make bench` measures.
# Both install what the project needs first: a virtualenv in .venv with requirements.txt, and
# the Debian packages it needs (Java for Spark; Chromium for the browser tests) when missing.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum requirements.txt | cut -d' ' -f1)

.PHONY: install run dev test bench chaos lint format system-deps browser-deps clean

install: $(STAMP) system-deps

$(STAMP): requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	@rm -f $(VENV)/.installed-*
	@touch $@

# Debian packages, installed only when missing (and only as root, with apt-get).
system-deps:
	@command -v java >/dev/null 2>&1 || $(MAKE) --no-print-directory apt PKGS="openjdk-17-jre-headless"

browser-deps:
	@test -x /usr/bin/chromium || $(MAKE) --no-print-directory apt PKGS="chromium"

apt:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "Installing $(PKGS) with apt-get ..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(PKGS) >/dev/null; \
	else echo "Missing Debian packages: $(PKGS). Install them (sudo apt-get install $(PKGS))." >&2; exit 1; fi

run: install
	$(PY) -m config.run

dev: install  # make run with DEBUG=1 (tracebacks, the development secret key)
	DEBUG=1 $(PY) -m config.run

test: install browser-deps
	$(PY) -m pytest $(PYTEST_ARGS)

bench: install
	$(PY) -m bench.run $(BENCH)

chaos: install  # every workflow kind under every fault, on its own PostgreSQL and Redis (20-30 min on 2 cores, and about 20 more for the kafka rows)
	$(PY) -m bench.chaos $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy  # files and strictness: pyproject.toml [tool.mypy]

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf .run
