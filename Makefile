# isrwatch: `make demo` and `make test` do all set-up (virtualenv, Python packages, JVM jars).
# Both are idempotent: stamps make the second run skip what is already installed.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMPS := .stamps
export PYSPARK_PYTHON := $(CURDIR)/$(PY)
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(PY)

.PHONY: demo test test-all lint bench jars venv clean

venv: $(STAMPS)/venv
$(STAMPS)/venv: pyproject.toml
	@mkdir -p $(STAMPS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing Python packages into $(VENV) (first run only)"
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e '.[dev]'
	@touch $@

jars: $(STAMPS)/jars
$(STAMPS)/jars: jvm/pom.xml
	@mkdir -p $(STAMPS)
	@echo "fetching the Delta Lake jars with Maven into jvm/jars (first run only)"
	@rm -rf jvm/jars
	@mvn -q -B -f jvm/pom.xml dependency:copy-dependencies -DoutputDirectory=jars -DincludeGroupIds=io.delta
	@touch $@

demo: venv jars
	$(VENV)/bin/isrwatch emulate --scenario conf/scenarios/default.yaml --lakehouse lakehouse

test: venv jars
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(PY) -m pytest -q

test-all: venv jars
	$(PY) -m pytest -q -m "slow or not slow"

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

bench: venv jars
	$(PY) bench/emulator.py

clean:
	rm -rf lakehouse _checkpoints spark-warehouse metastore_db derby.log .pytest_cache .mypy_cache .ruff_cache
