# The two commands a newcomer needs: `make demo` and `make test`. Both set up from nothing.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
CHECKOV_VENV := .venv-checkov
UV_VERSION := 0.13.9
BIN := $(VENV)/bin
PYTEST_ARGS ?=
PYTEST_WORKERS ?= 3  # test files run in this many pytest-xdist workers (each its own stack and Spark)

.PHONY: setup test test-unit test-integration demo lint lock bench clean help

help:  ## List the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

setup: $(VENV)/.installed $(CHECKOV_VENV)/.installed  ## Create .venv and .venv-checkov (idempotent)
	@bash scripts/ensure-chromium.sh  # Debian's chromium for the dashboard browser test
	@bash scripts/ensure-prometheus.sh  # Debian's prometheus (promtool) and alertmanager: alert tests, kappa monitor

$(VENV)/.installed: requirements/lock.txt pyproject.toml
	@bash scripts/check-prereqs.sh "$(PYTHON)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@test -x $(BIN)/uv || $(BIN)/python -m pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"
	$(BIN)/uv pip sync --quiet --compile-bytecode --python $(BIN)/python requirements/lock.txt
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e .
	@$(BIN)/python -m compileall -q jobs dags > /dev/null  # bytecode: see "Bytecode" in README
	@$(BIN)/python -m jobs.spark.bytecode  # pyspark's own zips: docs/explanation/streaming-performance.md
	@SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python -m jobs.spark_service.archive  # the local Spark JVM's classes, archived
	@touch $@

$(CHECKOV_VENV)/.installed: requirements/checkov-lock.txt $(VENV)/.installed
	@test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(BIN)/uv pip sync --quiet --python $(CHECKOV_VENV)/bin/python requirements/checkov-lock.txt
	@touch $@

test: setup lint  ## Run the linters, then the whole suite (unit, integration, infra) from nothing
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

test-unit: setup  ## Only the fast unit tests
	$(BIN)/python -m pytest -m unit $(PYTEST_ARGS)

test-integration: setup  ## Only the tests against the embedded stack
	$(BIN)/python -m pytest -m integration $(PYTEST_ARGS)

demo: setup  ## Run the main job on the embedded stack
	$(BIN)/kappa demo

lint: setup  ## ruff and mypy on the code (also the first step of `make test`)
	$(BIN)/ruff check jobs pipelines tests bench dags
	$(BIN)/mypy

lock:  ## Re-resolve requirements/lock.txt from requirements/main.in
	$(BIN)/uv pip compile requirements/main.in --python-version 3.11 --no-header \
	  --annotation-style line -o requirements/lock.txt

bench: setup  ## Run the benchmarks (prints JSON; see docs/benchmarks.md)
	$(BIN)/python bench/kafka_source.py
	$(BIN)/python bench/collector.py

clean:  ## Remove the virtualenvs (data in var/ stays; `kappa stack down --wipe` removes it)
	rm -rf $(VENV) $(CHECKOV_VENV)
