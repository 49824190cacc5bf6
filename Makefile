# sigwatch: one entry point. Every target creates the virtualenv it needs.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: help venv run test test-fast patterns-test patterns-lint catalogue bench reliability clean

help:
	@echo "make run          run the daemon on its embedded default configuration"
	@echo "make test         run the whole test suite (what CI runs)"
	@echo "make bench        speed and memory benchmark against mtail and grep (not a test)"
	@echo "make reliability  reliability scenario table (lost / duplicated lines)"
	@echo "make catalogue    regenerate patterns/README.md"

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || { \
	  echo "python3 -m venv failed: on Debian run 'apt-get install -y python3-venv'"; exit 1; }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

venv: $(STAMP)

# Default configuration: tails /var/log/training/**/*.log, serves metrics on 127.0.0.1:9750,
# prints detections on stdout. Ctrl-C stops it.
run: $(STAMP)
	@mkdir -p /var/log/training 2>/dev/null || true
	$(VENV)/bin/sigwatch run

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not integration"

patterns-test: $(STAMP)
	$(VENV)/bin/sigwatch patterns test

patterns-lint: $(STAMP)
	$(VENV)/bin/sigwatch patterns lint

catalogue: $(STAMP)
	$(VENV)/bin/sigwatch patterns catalogue > patterns/README.md

bench: $(STAMP)
	$(PY) bench/run_bench.py

reliability: $(STAMP)
	$(PY) bench/reliability.py

clean:
	rm -rf $(VENV) build dist .pytest_cache
