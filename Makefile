# cassieq-spark: every command a user or CI types.
# `make test` and `make demo` do their own setup; a fresh clone needs nothing else.
# Tests in tiers: check (lint + unit), test-fast, test, test-system, test-long (docs/testing.md).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
NODES  ?= 1
CASSANDRA_PORT ?= 9042
STAMP  := $(VENV)/.installed
JARS_STAMP := .cassandra/lib/.resolved

export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: serve soak spark-up spark-down spark-status spark-connect-up spark-connect-down spark-connect-status setup check test test-fast test-system test-long lint format demo bench bench-quick bench-profile \
        dist cassandra-up cassandra-down cassandra-status clean

setup: $(STAMP) $(JARS_STAMP)

# Each step says what it resolves before it starts (pip and Maven run quiet). pyproject.toml
# declares the ranges the package allows; constraints.txt pins the versions this checkout is
# tested with (a change to either rebuilds the venv).
$(STAMP): pyproject.toml constraints.txt
	@echo "setup: Python environment in $(VENV)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "setup: upgrading pip"
	$(PY) -m pip install -q --upgrade pip
	@echo "setup: resolving the package and its extras [spark,connect,cli,demo,server,test,bench] from pyproject.toml, at constraints.txt's versions"
	$(PY) -m pip install -q -c constraints.txt -e '.[spark,connect,cli,demo,server,test,bench]'
	touch $@

# Cassandra's server jars from Maven Central, through conf/pom.xml; cached in ~/.m2 and .cassandra/lib.
$(JARS_STAMP): conf/pom.xml
	@echo "setup: resolving Cassandra's server jars (conf/pom.xml) with Maven into .cassandra/lib"
	mkdir -p .cassandra/lib
	mvn -q -B -f conf/pom.xml dependency:copy-dependencies \
	    -DoutputDirectory=$(abspath .cassandra/lib) -DincludeScope=runtime
	touch $@

# The HTTP service (docs/service.md) on the Cassandra on 127.0.0.1:$(CASSANDRA_PORT), or the embedded
# one started for it; its secret and admin key are made once in .serve/ (mode 600). It installs
# only what it needs: the [server] extra and the launcher's psutil (constraints.txt's versions).
HTTP_PORT ?= 8080
SERVE_STAMP := $(VENV)/.installed-serve
$(SERVE_STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt -e '.[server]' psutil
	touch $@

serve: $(SERVE_STAMP) $(JARS_STAMP)
	$(PY) -m cassieq_dev.local_cassandra up --port $(CASSANDRA_PORT)
	mkdir -p .serve && chmod 700 .serve
	test -s .serve/secret || (umask 077 && $(PY) -c 'import secrets; print(secrets.token_urlsafe(32))' > .serve/secret)
	test -s .serve/admin-key || (umask 077 && $(PY) -c 'import secrets; print(secrets.token_urlsafe(32))' > .serve/admin-key)
	@echo "admin key: .serve/admin-key; API on http://127.0.0.1:$(HTTP_PORT)/api/v1, dashboard /dashboard"
	@echo "a first queue, in another terminal: .venv/bin/cassieq account create acme (docs/service.md)"
	$(PY) -m cassieq_spark.cli --port $(CASSANDRA_PORT) serve --bootstrap --create-keyspace --repair \
	  --http-port $(HTTP_PORT) --secret-file .serve/secret --admin-key-file .serve/admin-key

# Durable by default (commitlog synced before each acknowledgement; survives a SIGKILL or an
# OOM); DURABLE=0 starts the fast node that loses what it acknowledged on a crash. A node killed
# or stopped comes back on the port it was asked for (docs/local-cassandra.md).
# CASSANDRA_BASE_DIR: where the nodes' data, logs and pid files are (a second node beside it).
CASSANDRA_BASE_DIR ?= .cassandra/nodes
cassandra-up: setup
	$(PY) -m cassieq_dev.local_cassandra up --nodes $(NODES) --port $(CASSANDRA_PORT) \
	  --base-dir $(CASSANDRA_BASE_DIR) \
	  $(if $(filter 0 no false,$(DURABLE)),--fast) $(if $(filter 1 yes true,$(AUTH)),--auth) \
	  $(if $(filter 1 yes true on,$(TLS)),--tls on) $(if $(filter mutual,$(TLS)),--tls mutual)

cassandra-down:
	$(PY) -m cassieq_dev.local_cassandra down --base-dir $(CASSANDRA_BASE_DIR)

cassandra-status:
	$(PY) -m cassieq_dev.local_cassandra status --base-dir $(CASSANDRA_BASE_DIR)

# A Spark standalone master and workers on 127.0.0.1 (logs and pid files in .spark/).
WORKERS ?= 2
WORKER_CORES ?= 1
spark-up: setup
	$(PY) -m cassieq_dev.local_spark up --workers $(WORKERS) --worker-cores $(WORKER_CORES)

spark-down:
	$(PY) -m cassieq_dev.local_spark down

spark-status:
	$(PY) -m cassieq_dev.local_spark status --workers $(WORKERS)

# A Spark Connect server on sc://127.0.0.1:$(CONNECT_PORT) (log and pid file in .spark/connect/),
# its Python workers on this venv (where the connector is installed); its jobs run in local[2],
# or on the standalone cluster of `make spark-up` with CONNECT_MASTER=spark://127.0.0.1:7077.
CONNECT_PORT ?= 15002
CONNECT_MASTER ?= local[2]
spark-connect-up: setup
	$(PY) -m cassieq_dev.local_connect up --port $(CONNECT_PORT) --master '$(CONNECT_MASTER)'

spark-connect-down:
	$(PY) -m cassieq_dev.local_connect down --port $(CONNECT_PORT)

spark-connect-status:
	$(PY) -m cassieq_dev.local_connect status --port $(CONNECT_PORT)

# The test tiers (docs/testing.md: what each holds, its budget, how a test states its tier). Each
# prints every test that took 0.5 s or more and writes a JUnit report to .test-reports/.
PYTEST_REPORT = --durations=0 --durations-min=0.5 --junitxml=.test-reports/$@.xml

# make test-fast and make test run on TEST_WORKERS pytest-xdist workers (whole files each)
# sharing one Cassandra node: their tests mostly wait on visibility timeouts and Spark triggers,
# not on the CPU.
TEST_WORKERS ?= 2

check: lint
	$(PY) -m pytest -m unit $(PYTEST_REPORT)

test-fast: setup
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "unit or (fast and not slow)" $(PYTEST_REPORT)

test: setup
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not system and not long" $(PYTEST_REPORT)

test-system: setup
	$(PY) -m pytest -m system -s $(PYTEST_REPORT)

test-long: setup
	$(PY) -m pytest -m long -s $(PYTEST_REPORT)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy cassieq_spark cassieq_dev pyspark_cassieq jobs bench

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
