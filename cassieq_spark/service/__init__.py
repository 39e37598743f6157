"""``cassieq serve``: the CassieQ REST API (v1, compatible with existing CassieQ clients) and a
batch API (v2) over HTTP, on the same engine as the client, the CLI and the Spark connector.

One concept per module: ``names`` (accounts as a namespace of queue names), ``signing`` (the
three auth schemes' signatures), ``accounts`` (accounts and their sealed keys in Cassandra),
``auth`` (who a request is and what it may do), ``responses`` (the error bodies), ``v1``,
``v2`` and ``admin`` (the routes), ``metrics``, ``app`` (the ASGI application),
``config`` and ``server`` (flags, environment, uvicorn, the repair loop).
The dependencies are the ``[server]`` extra: Starlette on uvicorn, prometheus-client,
cryptography.
"""
