# bk-spark: the two commands a new user needs are `make demo` and `make test`.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
BK     := $(VENV)/bin/bk
STAMP  := $(VENV)/.installed

.PHONY: install demo cluster-demo test test-long test-unit test-integration bench lint proto faults \
	faults-network clean java readme chromium promtool dashboards

install: $(STAMP)

# Java runs the embedded ZooKeeper; install a JRE from Debian when it is missing.
java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "java not found: installing openjdk-17-jre-headless (Debian)"; \
	  apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless; }

# The status page's test drives Debian's Chromium (Playwright's own browser download is not
# used); the alert rules' test runs Prometheus' promtool (Debian's prometheus package).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "chromium not found: installing Debian's chromium (the status page's browser test)"; \
	  apt-get update -qq && apt-get install -y -qq chromium; }

promtool:
	@command -v promtool >/dev/null 2>&1 || { \
	  echo "promtool not found: installing Debian's prometheus (promtool checks the alert rules)"; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus; }

$(STAMP): pyproject.toml | java
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e ".[dev]" --config-settings editable_mode=compat
	@touch $(STAMP)

demo: install
	@bash scripts/demo.sh

# bk-spark beyond one machine: a ZooKeeper ensemble, 5 bookies and Spark standalone (master +
# 2 workers), each on its own host (network namespaces, else loopback addresses); the examples
# through spark-submit --master spark://..., a ZooKeeper leader and a bookie killed, network
# partitions, a read through Spark Connect. Everything is torn down at the end.
cluster-demo: install
	$(PY) -m pip install -q --disable-pip-version-check -e ".[dev,connect]" \
	  --config-settings editable_mode=compat
	$(PY) -m bk_spark.testbed

# make test keeps under 20 minutes on a 2-core machine: scenarios marked `long` (a short
# mode of each stays in make test) run in make test-long, and their long forms in make faults.
# The test tools (a browser, promtool) come with make test only: make demo needs neither.
test: install chromium promtool
	$(PY) -m pytest -q -p no:cacheprovider --durations=15 -m "not long" tests

test-long: install chromium promtool
	$(PY) -m pytest -q -p no:cacheprovider --durations=15 -m long tests

test-unit: install promtool
	$(PY) -m pytest -q tests/unit

test-integration: install chromium promtool
	$(PY) -m pytest -q tests/integration

bench: install
	$(PY) -m bench

# Fault injection: 200 seeded long schedules against real processes (bookies killed, paused,
# filled, corrupted; ZooKeeper restarted; writers and the Spark driver killed), checked by an
# independent checker. Prints a summary; a failing schedule prints the command replaying it.
faults: install test-long
	$(PY) -m bk_spark.faults --schedules 200
	$(MAKE) faults-network

# Network faults on the multi-host test bed (namespaces; says so and passes without them):
# 24 long schedules of partitions (writer | bookie, bookie | ZooKeeper, ZooKeeper leader |
# followers on the minority and the majority side) and link delay / connection loss, mixed
# with bookie and writer faults; then a live Spark streaming query on the standalone cluster
# through a ZooKeeper leader kill and a rolling restart of every bookie (exactly once).
faults-network: install
	$(PY) -m bk_spark.faults --network --schedules 24
	$(PY) -m bk_spark.testbed --streaming-only

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check bk_spark/core bk_spark/errors.py || true

# Regenerate the Grafana dashboard and Prometheus alert rules from the metric registries;
# tests/unit/test_dashboards.py fails when they are stale.
dashboards: install
	$(PY) -m bk_spark.admin.dashboard

# Regenerate protobuf/gRPC code; tests/unit/test_proto_fresh.py fails when it is stale.
proto: install
	$(PY) -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --pyi_out=. \
	  bk_spark/proto/bookie.proto

# Rewrite README.md's generated tables (tests/unit/test_readme_tables.py fails when stale).
readme: install
	$(PY) -m bk_spark.readme

clean:
	rm -rf $(VENV) .bk-sandbox .demo-sandbox build *.egg-info
