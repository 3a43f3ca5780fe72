# isrwatch: `make demo` and `make test` do all set-up (virtualenv, Python packages, JVM jars).
# Both are idempotent: stamps make the second run skip what is already installed.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMPS := .stamps
LOCAL_MASTER_JAR := jvm/local-master/isrwatch-local-master.jar
CLASS_ARCHIVE := jvm/local-master/spark-classes.jsa
# Maven quiet: Debian's Maven 3.8 prints ANSI colour resets even with -q -B (and -Dstyle.color=never), so its output is kept in a log shown
# only when it fails.
MVN = mvn -q -B
MVN_LOG := jvm/.mvn.log
define quiet_mvn
$(MVN) $(1) > $(MVN_LOG) 2>&1 || { cat $(MVN_LOG); exit 1; }
endef
export PYSPARK_PYTHON := $(CURDIR)/$(PY)
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(PY)

.PHONY: demo demo-kafka test test-all lint bench bench-collect bench-fidelity bench-batch-sizes bench-alert-latency bench-intent-store bench-source-floors bench-catch-up bench-real-alerts jars kafka-jars s3-jars venv chromium plotly-bundle clean

# pip -qq for the project itself: errors only (with -q, setuptools' note on every editable install, that
# folders named like a package may shadow it, is printed in the middle of `make demo`).
venv: $(STAMPS)/venv
$(STAMPS)/venv: pyproject.toml
	@mkdir -p $(STAMPS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing Python packages into $(VENV) (first run only)"
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -qq -e '.[dev]'
	@# Spark puts pyspark's own python/lib/pyspark.zip first on its Python workers' path, and a zip's modules are
	@# compiled again at every worker start (1.5 s of CPU instead of 0.5 s from the venv's cached bytecode; under
	@# load the streaming source runner missed Spark's fixed 10 s connect-back): without it they import this venv's pyspark.
	@rm -f "$$($(PY) -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')/python/lib/pyspark.zip"
	@touch $@

jars: $(STAMPS)/jars $(LOCAL_MASTER_JAR) $(CLASS_ARCHIVE)
$(STAMPS)/jars: jvm/pom.xml
	@mkdir -p $(STAMPS)
	@echo "fetching the Delta Lake jars with Maven into jvm/jars (first run only)"
	@rm -rf jvm/jars
	@$(call quiet_mvn,-f jvm/pom.xml dependency:copy-dependencies -DoutputDirectory=jars -DincludeGroupIds=io.delta)
	@touch $@

# isrwatch's classes for a local master (jvm/local-master): Hadoop's local file system setting permissions without
# forking `chmod`, and the driver's throughput work (Spark's tasks, the JIT compiler, validate's stream thread) at a
# lower CPU priority. Compiled against the Hadoop and Spark APIs that pyspark ships, so nothing is downloaded for them.
LOCAL_MASTER_SOURCES := $(shell find jvm/local-master/src -name '*.java')
$(LOCAL_MASTER_JAR): $(LOCAL_MASTER_SOURCES) $(STAMPS)/venv
	@echo "compiling isrwatch's classes for a local master into $@"
	@rm -rf jvm/local-master/classes && mkdir -p jvm/local-master/classes
	@javac --release 17 -nowarn -d jvm/local-master/classes \
		-cp "$$($(PY) -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')/*" \
		$(LOCAL_MASTER_SOURCES)
	@jar cf $@ -C jvm/local-master/classes isrwatch

# The classes a local driver loads, parsed and verified once for every later JVM (foundation/class_archive.py).
$(CLASS_ARCHIVE): $(LOCAL_MASTER_JAR) $(STAMPS)/jars
	@echo "archiving the classes of a local Spark driver into $@ (first run only, ~1 min)"
	@$(PY) -m foundation.class_archive $@

# A real Apache Kafka (broker, storage tool, log4j2) and the Prometheus JMX exporter agent for the collector's
# tests (testing/kafka/), fetched like the Delta jars; only the targets that start a broker need them.
kafka-jars: $(STAMPS)/kafka-jars
$(STAMPS)/kafka-jars: jvm/kafka/pom.xml
	@mkdir -p $(STAMPS)
	@echo "fetching Apache Kafka and the JMX exporter with Maven into jvm/kafka/jars (first run only)"
	@rm -rf jvm/kafka/jars
	@$(call quiet_mvn,-f jvm/kafka/pom.xml dependency:copy-dependencies -DoutputDirectory=jars)
	@mkdir -p jvm/kafka/jars/standalone && mv jvm/kafka/jars/jmx_prometheus_httpserver-*.jar jvm/kafka/jars/standalone/
	@touch $@

# Spark's S3A connector (hadoop-aws for the Hadoop inside pyspark, and only the AWS SDK modules it loads), for
# lakehouses on an object store, and s3proxy, the S3-compatible server on loopback the tests and the cluster
# demo write to (foundation/object_store.py, testing/s3proxy.py).
s3-jars: $(STAMPS)/s3-jars
$(STAMPS)/s3-jars: jvm/s3/pom.xml jvm/s3proxy/pom.xml
	@mkdir -p $(STAMPS)
	@echo "fetching Spark's S3A connector and s3proxy with Maven into jvm/s3/jars and jvm/s3proxy/jars (first run only)"
	@rm -rf jvm/s3/jars jvm/s3proxy/jars
	@$(call quiet_mvn,-f jvm/s3/pom.xml dependency:copy-dependencies -DoutputDirectory=jars)
	@$(call quiet_mvn,-f jvm/s3proxy/pom.xml dependency:copy-dependencies -DoutputDirectory=jars)
	@touch $@

# The dashboards load a plotly.js built for them: plotly.js's core (scatter, cartesian axes) with bar and
# heatmap, the only other trace types the pages draw (tables are HTML). A fresh browser loads and runs it in
# ~0.15 s, against ~0.55 s for the published cartesian bundle and ~1.2 s for the full plotly.min.js. npm ci
# installs plotly.js and esbuild at the versions and sha512 integrity pinned in dashboards/plotly_bundle's
# package-lock.json (plotly.js: the version the Python plotly package targets, which
# tests/dashboards/test_plotly_bundle.py checks); the build folder is removed afterwards. Without the
# bundle the dashboards fall back to the plotly package's full plotly.min.js.
PLOTLY_BUNDLE := vendor/plotly/plotly-isrwatch.min.js
PLOTLY_BUILD := vendor/plotly/build
plotly-bundle: $(PLOTLY_BUNDLE)
$(PLOTLY_BUNDLE): dashboards/plotly_bundle/package.json dashboards/plotly_bundle/package-lock.json \
                  dashboards/plotly_bundle/entry.js
	@echo "building plotly.js for the dashboards (scatter, bar, heatmap) with npm and esbuild into vendor/plotly (first run only)"
	@rm -rf $(PLOTLY_BUILD) && mkdir -p $(PLOTLY_BUILD)
	@cp $^ $(PLOTLY_BUILD)/
	@cd $(PLOTLY_BUILD) && npm ci --no-audit --no-fund --loglevel=error > npm.log 2>&1 || { cat npm.log; exit 1; }
	@cd $(PLOTLY_BUILD) && node_modules/.bin/esbuild entry.js --bundle --minify --format=iife --global-name=Plotly \
	  --define:global=window --define:define.amd=false --loader:.css=empty --target=es2016 --log-level=warning \
	  --banner:js="/** plotly.js (isrwatch: core, bar, heatmap - minified) v$$(node -p "require('plotly.js/package.json').version") | MIT License */" \
	  --outfile=plotly-isrwatch.min.js
	@mv $(PLOTLY_BUILD)/plotly-isrwatch.min.js $@ && rm -rf $(PLOTLY_BUILD)

# The browser tests drive Debian's chromium (Playwright's own browser download needs the internet).
chromium: $(STAMPS)/chromium
$(STAMPS)/chromium:
	@mkdir -p $(STAMPS)
	@if ! command -v chromium >/dev/null; then \
	  echo "installing Debian's chromium for the browser tests (first run only)"; \
	  SUDO=$$(test "$$(id -u)" -eq 0 || echo sudo); \
	  $$SUDO apt-get install -y -q chromium >/dev/null 2>&1 || \
	    { $$SUDO apt-get update -q >/dev/null && $$SUDO apt-get install -y -q chromium >/dev/null; }; \
	fi
	@chromium --version
	@touch $@

DEMO_SQL := SELECT table_name, sum(rows_in) AS rows_in, sum(rows_valid) AS to_silver, sum(rows_quarantined) AS quarantined FROM silver.dq_runs GROUP BY table_name ORDER BY table_name;\n\
SELECT topic, acks, sum(records_acked) AS acked, sum(records_lost) AS acked_then_lost FROM silver.ack_ledger GROUP BY topic, acks ORDER BY acked_then_lost DESC, topic LIMIT 6;\n\
SELECT topic, replication_factor AS rf, effective_min_isr AS min_isr, failure_domains, verdict_class, findings FROM gold.posture ORDER BY topic;\n\
SELECT slo, round(max_by(sli_value, ts), 6) AS sli, round(max_by(error_budget_remaining, ts), 3) AS budget_left, round(max(burn_rate_1h), 1) AS worst_burn_1h, max(page) AS paged FROM gold.slo_status GROUP BY slo ORDER BY slo;\n\
SELECT rule, severity, count_if(status = 'firing') AS firing, count_if(status = 'resolved') AS resolved FROM gold.alerts GROUP BY rule, severity ORDER BY rule;\n\
SELECT outcome, count(*) AS attempts FROM gold.deliveries WHERE outcome <> 'sending' GROUP BY outcome;\n

# A webhook receiver prints the alerts it gets; the API and dashboards are served from the start (they fill
# in as data lands); the emulator runs the default scenario (as fast as it can while sharing the CPU with
# Spark) while the pipeline (validate, posture, slo, alerts) streams each commit through; the pipeline stops
# once it has caught up and nothing changed for 20 s; a few SQL queries show the result and the dashboards
# are also exported as static HTML. In a terminal the server then keeps serving until Ctrl-C; Ctrl-C at any
# point stops every process. ISRWATCH_DEMO_PORT picks another port than 8080.
DEMO_PORT ?= $(or $(ISRWATCH_DEMO_PORT),8080)
demo: venv jars $(PLOTLY_BUNDLE)
	@trap 'kill $$receiver $$emulator $$server 2>/dev/null; wait; echo "isrwatch demo: stopped"; exit 130' INT TERM; \
	  $(VENV)/bin/isrwatch webhook-receiver --port 9095 & receiver=$$!; \
	  $(VENV)/bin/isrwatch serve --lakehouse lakehouse --port $(DEMO_PORT) > .stamps/demo-serve.log 2>&1 & server=$$!; \
	  echo "isrwatch demo: dashboards at http://127.0.0.1:$(DEMO_PORT)/ (they fill in as the pipeline runs)"; \
	  $(VENV)/bin/isrwatch emulate --scenario conf/scenarios/default.yaml --lakehouse lakehouse --pace 3 --quiet \
	  > .stamps/demo-emulator.log 2>&1 & emulator=$$!; \
	  $(VENV)/bin/isrwatch pipeline run --lakehouse lakehouse --trigger live --stop-when-idle 20 --status-every 20; \
	  pipeline=$$?; wait $$emulator; status=$$?; kill $$receiver; wait $$receiver; cat .stamps/demo-emulator.log; \
	  test $$status -eq 0 && test $$pipeline -eq 0 || { kill $$server; exit 1; }; \
	  printf "$(DEMO_SQL)" | $(VENV)/bin/isrwatch sql --lakehouse lakehouse || { kill $$server; exit 1; }; \
	  $(VENV)/bin/isrwatch dashboards export --lakehouse lakehouse --out demo-dashboards; \
	  curl -sf -o /dev/null http://127.0.0.1:$(DEMO_PORT)/readyz || { echo "isrwatch demo: the API is not ready:"; \
	    cat .stamps/demo-serve.log; kill $$server; exit 1; }; \
	  echo "isrwatch demo: the dashboards: http://127.0.0.1:$(DEMO_PORT)/  (static copy: demo-dashboards/index.html)"; \
	  if [ -t 0 ]; then echo "isrwatch demo: serving until Ctrl-C"; wait $$server; \
	  else kill $$server; wait $$server 2>/dev/null; echo "isrwatch demo: done (not a terminal, so the server" \
	    "stopped; '.venv/bin/isrwatch serve' serves the dashboards again)"; fi

# The same pipeline, API and receiver on a real Kafka 4.3.1 cluster (testing/kafka/: 1 controller + 3 brokers on
# 127.0.0.1) watched by `isrwatch collect`: a producer workload, a broker stalled (SIGSTOP) for 40 s, another killed
# and restarted, then a SQL summary; about 4 minutes. Ctrl-C stops every process and JVM it started
# (docs/collector.md). Its lakehouse is lakehouse-kafka/, emptied at the start.
demo-kafka: venv jars kafka-jars $(PLOTLY_BUNDLE)
	@$(PY) -m testing.kafka.demo --port $(DEMO_PORT)

# Two workers, one per core (a third only adds contention: the suite is CPU-bound). A test file is one group
# (tests/conftest.py), started in the order conftest gives, heaviest first (--no-loadscope-reorder: xdist would
# sort them by test count).
PYTEST_DIST = -n 2 --dist loadgroup --no-loadscope-reorder

test: venv jars kafka-jars s3-jars chromium $(PLOTLY_BUNDLE)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-logo --no-cache
	$(PY) -m pytest -q $(PYTEST_DIST) --durations=40

test-all: venv jars kafka-jars s3-jars chromium $(PLOTLY_BUNDLE)
	$(PY) -m pytest -q $(PYTEST_DIST) -m "slow or not slow"

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-logo --no-cache

bench: venv jars $(PLOTLY_BUNDLE)
	$(PY) bench/emulator.py
	$(PY) bench/pipeline.py
	$(PY) bench/alert_quality.py
	$(PY) bench/api.py

# The collector on a real Kafka cluster with 3,000 partitions: interval cost, CPU share, fault -> bronze commit
# (docs/benchmarks.md). Not part of `bench`: it starts four Kafka JVMs.
bench-collect: venv jars kafka-jars
	$(PY) bench/collect.py

# Alerts on the fixture cluster with the shipped settings, seven fault plans twice each, scored against the cluster's
# own ground truth (docs/benchmarks.md): once with the brokers exporting under the project's rules, once under
# Strimzi's. Not part of `make test`: about 40 minutes for each.
bench-real-alerts: venv jars kafka-jars
	$(PY) bench/real_alerts.py --exporter isrwatch
	$(PY) bench/real_alerts.py --exporter strimzi

# The emulator beside a real Kafka 4.3 cluster under the same faults, two real runs per fault (docs/benchmarks.md).
# About half an hour: it starts a fresh four-JVM cluster for every real run.
bench-fidelity: venv jars kafka-jars
	$(PY) bench/fidelity.py --check

# Validate's executor route per micro-batch size (100k to 10M rows), local and on a Spark standalone cluster
# (testing/spark_standalone.py), then a worker killed mid-batch (docs/cluster.md). Not part of `bench`: about 20 min.
bench-batch-sizes: venv jars
	$(PY) bench/batch_sizes.py

# Alert latency beside a tuned Prometheus + Alertmanager peer fed from the same bronze commits, in one live run
# (docs/benchmarks.md). Not part of `bench`: it installs Debian's prometheus and prometheus-alertmanager (never
# `make test`) and runs four live scenarios, about 15 min.
bench-alert-latency: venv jars $(STAMPS)/prometheus
	$(PY) bench/alert_latency.py

# Where a webhook intent is committed before its POST: the journal against a delta-rs commit, local and s3proxy (~1 min).
bench-intent-store: venv s3-jars
	$(PY) bench/intent_store.py

# The floor under that latency: a live micro-batch's rows on the driver, by the shape of validate's source (~9 min).
bench-source-floors: venv jars
	$(PY) bench/source_floors.py

# What a micro-batch of validate's source costs N bronze commits behind, against the alert lane's log source (~15 min).
bench-catch-up: venv jars
	$(PY) bench/catch_up.py

$(STAMPS)/prometheus:
	@mkdir -p $(STAMPS)
	@if ! command -v prometheus >/dev/null || ! command -v prometheus-alertmanager >/dev/null; then \
	  echo "installing Debian's prometheus and prometheus-alertmanager for the latency bench (first run only)"; \
	  SUDO=$$(test "$$(id -u)" -eq 0 || echo sudo); \
	  $$SUDO apt-get install -y -q prometheus prometheus-alertmanager >/dev/null 2>&1 || \
	    { $$SUDO apt-get update -q >/dev/null && $$SUDO apt-get install -y -q prometheus prometheus-alertmanager >/dev/null; }; \
	fi
	@prometheus --version 2>&1 | head -1 && prometheus-alertmanager --version 2>&1 | head -1
	@touch $@

clean:
	rm -rf lakehouse lakehouse-kafka demo-dashboards _checkpoints spark-warehouse metastore_db derby.log .pytest_cache .mypy_cache .ruff_cache
