# cassieq-spark: every command a user or CI types.
# `make test` and `make demo` do their own setup; a fresh clone needs nothing else.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
NODES  ?= 1
CASSANDRA_PORT ?= 9042
STAMP  := $(VENV)/.installed
JARS_STAMP := .cassandra/lib/.resolved

export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: soak test-cluster-faults spark-up spark-down spark-status setup test test-soak test-unit test-integration test-faults lint format demo bench bench-quick bench-profile \
        dist cassandra-up cassandra-down cassandra-status clean

setup: $(STAMP) $(JARS_STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench]'
	touch $@

# Cassandra's server jars from Maven Central, through conf/pom.xml; cached in ~/.m2 and .cassandra/lib.
$(JARS_STAMP): conf/pom.xml
	mkdir -p .cassandra/lib
	mvn -q -B -f conf/pom.xml dependency:copy-dependencies \
	    -DoutputDirectory=$(abspath .cassandra/lib) -DincludeScope=runtime
	touch $@

cassandra-up: setup
	$(PY) -m cassieq_spark.local_cassandra up --nodes $(NODES) --port $(CASSANDRA_PORT) \
	  $(if $(filter 1 yes true,$(DURABLE)),--durable) $(if $(filter 1 yes true,$(AUTH)),--auth) \
	  $(if $(filter 1 yes true on,$(TLS)),--tls on) $(if $(filter mutual,$(TLS)),--tls mutual)

cassandra-down:
	$(PY) -m cassieq_spark.local_cassandra down

cassandra-status:
	$(PY) -m cassieq_spark.local_cassandra status

# A Spark standalone master and workers on 127.0.0.1 (logs and pid files in .spark/).
WORKERS ?= 2
WORKER_CORES ?= 1
spark-up: setup
	$(PY) -m cassieq_spark.local_spark up --workers $(WORKERS) --worker-cores $(WORKER_CORES)

spark-down:
	$(PY) -m cassieq_spark.local_spark down

spark-status:
	$(PY) -m cassieq_spark.local_spark status --workers $(WORKERS)

test: setup
	$(PY) -m pytest -m "not soak"

# Only the node-fault tests (3-node cluster and single node), with their progress printed.
test-cluster-faults: setup
	$(PY) -m pytest -m cluster -s

test-soak: setup
	$(PY) -m pytest -m soak -s

# The engine, sink and source integration tests again, with every compare-and-set's reply lost
# after it applied (engine/store/faults.py): callers must settle each outcome by reading.
FAULT_TESTS := tests/integration/test_reservations.py tests/integration/test_engine_semantics.py \
	tests/integration/test_engine_concurrency.py tests/integration/test_engine_repair.py \
	tests/integration/test_sink.py tests/integration/test_source_stream.py \
	tests/integration/test_source_batch.py tests/integration/test_moves.py tests/integration/test_purge.py \
	tests/integration/test_batch_receive.py tests/integration/test_stream_deliveries.py \
	tests/integration/test_client_claim_during_stream_takeover.py \
	$(wildcard tests/integration/test_protocol_*.py)
test-faults: setup
	CASSIEQ_FAULTS=lost-reply CASSIEQ_TEST_CONCURRENCY_MESSAGES=2000 \
	  $(PY) -m pytest -m "not slow and not soak" $(FAULT_TESTS)

test-unit: setup
	$(PY) -m pytest -m unit

test-integration: setup
	$(PY) -m pytest -m integration

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy cassieq_spark pyspark_cassieq jobs bench

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# SPARK_MASTER=spark://127.0.0.1:7077 runs it on the cluster of `make spark-up`.
demo: setup
	$(PY) jobs/demo.py --port $(CASSANDRA_PORT) $(if $(SPARK_MASTER),--master $(SPARK_MASTER))

bench: setup
	$(PY) -m bench.run --full

bench-quick: setup
	$(PY) -m bench.run --quick

# Where each path's time goes (bench/profile_run.py): bench/results/profile-<stamp>-*.txt.
bench-profile: setup
	nice -n 10 $(PY) -m bench.profile_run --port $(CASSANDRA_PORT)

# A wheel and an sdist in dist/ (the wheel is built from the sdist, so both are checked).
dist: setup
	rm -rf dist
	$(PY) -m build --outdir dist .

clean:
	rm -rf $(VENV) .cassandra build dist *.egg-info

# Every producer and consumer at once for MINUTES on a durable local Cassandra of NODES nodes
# (its own, on port 21042); writes bench/results/soak-<stamp>.json. Not run by CI.
MINUTES ?= 10
soak: setup
	$(PY) -m bench.soak --minutes $(MINUTES) --nodes $(NODES)
