"""Development launchers of this repository, not part of the installed package.

``local_cassandra`` starts Apache Cassandra 5.0 from the Maven Central jars of a checkout
(``conf/``, ``.cassandra/``) and ``local_spark`` a Spark standalone cluster beside it: what
``make cassandra-up``, ``make demo``, ``make spark-up`` and the tests use. Both assume a
checkout and a Linux machine, so the wheel does not contain them (pyproject.toml lists only
``cassieq_spark`` and ``pyspark_cassieq``); a user of the wheel brings a Cassandra of their own.
"""
