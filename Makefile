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

DEMO_SQL := SELECT table_name, sum(rows_in) AS rows_in, sum(rows_valid) AS to_silver, sum(rows_quarantined) AS quarantined FROM silver.dq_runs GROUP BY table_name ORDER BY table_name;\n\
SELECT topic, acks, sum(records_acked) AS acked, sum(records_lost) AS acked_then_lost FROM silver.ack_ledger GROUP BY topic, acks ORDER BY acked_then_lost DESC, topic LIMIT 6;\n\
SELECT topic, replication_factor AS rf, effective_min_isr AS min_isr, failure_domains, verdict_class, findings FROM gold.posture ORDER BY topic;\n\
SELECT slo, round(max_by(sli_value, ts), 6) AS sli, round(max_by(error_budget_remaining, ts), 3) AS budget_left, round(max(burn_rate_1h), 1) AS worst_burn_1h, max(page) AS paged FROM gold.slo_status GROUP BY slo ORDER BY slo;\n\
SELECT rule, severity, count_if(status = 'firing') AS firing, count_if(status = 'resolved') AS resolved FROM gold.alerts GROUP BY rule, severity ORDER BY rule;\n\
SELECT outcome, count(*) AS attempts FROM gold.deliveries GROUP BY outcome;\n

# A webhook receiver prints the alerts it gets; the emulator runs the default scenario (as fast as it
# can while sharing the CPU with Spark) while the pipeline (validate, posture, slo, alerts) streams
# each commit through; the pipeline stops once it has caught up and nothing changed for 20 s; then a
# few SQL queries show the result.
demo: venv jars
	@$(VENV)/bin/isrwatch webhook-receiver --port 9095 & receiver=$$!; \
	  $(VENV)/bin/isrwatch emulate --scenario conf/scenarios/default.yaml --lakehouse lakehouse --pace 3 --quiet \
	  > .stamps/demo-emulator.log 2>&1 & emulator=$$!; \
	  $(VENV)/bin/isrwatch pipeline run --lakehouse lakehouse --trigger live --stop-when-idle 20 --status-every 20; \
	  pipeline=$$?; wait $$emulator; status=$$?; kill $$receiver; wait $$receiver; cat .stamps/demo-emulator.log; \
	  test $$status -eq 0 && test $$pipeline -eq 0
	@printf "$(DEMO_SQL)" | $(VENV)/bin/isrwatch sql --lakehouse lakehouse

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
	$(PY) bench/pipeline.py
	$(PY) bench/alert_quality.py

clean:
	rm -rf lakehouse _checkpoints spark-warehouse metastore_db derby.log .pytest_cache .mypy_cache .ruff_cache
