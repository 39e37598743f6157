"""The service's one API document is built from its route table: every route and method is
described, nothing is described that is not served, every error is documented by shape."""

from __future__ import annotations

import pytest
from starlette.routing import Route

from cassieq_spark.service import openapi
from cassieq_spark.service.app import route_table


def test_the_document_describes_exactly_the_routes_served() -> None:
    routes = route_table()
    doc = openapi.document(routes)
    assert doc["openapi"] == "3.1.0"
    served = {
        (m.lower(), r.path) for r in routes if isinstance(r, Route) for m in r.methods or ()
    } - {(m, p) for m, p in [("head", r.path) for r in routes if isinstance(r, Route)]}
    described = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert described == served
    # v1, v2 and the admin API are all in it
    assert "/api/v1/accounts/{account}/queues/{queue}/messages/next" in doc["paths"]
    assert "/api/v2/accounts/{account}/queues/{queue}/messages/ack" in doc["paths"]
    assert "/admin/api/v1/permissions" in doc["paths"]
    for ops in doc["paths"].values():
        for op in ops.values():
            assert op["responses"]["default"] is openapi.ERROR
            assert any(code.startswith("2") for code in op["responses"])


def test_a_route_without_a_description_cannot_be_served_silently() -> None:
    async def nothing(request):  # pragma: no cover - never called
        raise AssertionError

    with pytest.raises(LookupError, match="GET /api/v1/accounts/{account}/secret"):
        openapi.document([*route_table(), Route("/api/v1/accounts/{account}/secret", nothing)])
    with pytest.raises(LookupError, match="not served"):
        openapi.document([r for r in route_table() if getattr(r, "path", "") != "/metrics"])
