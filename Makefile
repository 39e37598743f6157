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

.PHONY: setup test test-unit test-integration lint format demo bench bench-quick \
        cassandra-up cassandra-down cassandra-status clean

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
	$(PY) -m cassieq_spark.local_cassandra up --nodes $(NODES) --port $(CASSANDRA_PORT)

cassandra-down:
	$(PY) -m cassieq_spark.local_cassandra down

cassandra-status:
	$(PY) -m cassieq_spark.local_cassandra status

test: setup
	$(PY) -m pytest

test-unit: setup
	$(PY) -m pytest -m unit

test-integration: setup
	$(PY) -m pytest -m integration

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

demo: setup
	$(PY) jobs/demo.py

bench: setup
	$(PY) -m bench.run --full

bench-quick: setup
	$(PY) -m bench.run --quick

clean:
	rm -rf $(VENV) .cassandra build *.egg-info
