"""A property-based fuzzer (Schemathesis) against a live ``cassieq serve``, from the service's
own OpenAPI document (``GET /openapi.json``): for every operation, generated requests (valid
and invalid values in the path, query, headers and body) never get a 5xx, and every answer
conforms to the document (a documented status, content type and body shape; errors are one of
the three documented error shapes).

The queue routes are called on a live account with its key (a generated account would only
meet 401s), on a queue that holds messages; the admin routes with the admin key and generated
account names. Bounded here: a fixed seed and ``CASSIEQ_FUZZ_EXAMPLES`` examples per operation
(default 3), both printed; ``make test-long`` runs it with many more
(``tests/long/test_service_fuzz_long.py``).
"""

from __future__ import annotations

import json
import os
import traceback
import uuid

import pytest
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from support.service_harness import LOOPBACK, start_test_server

SEED = int(os.environ.get("CASSIEQ_FUZZ_SEED", "20261202"))
EXAMPLES = int(os.environ.get("CASSIEQ_FUZZ_EXAMPLES", "3"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def live(cassandra, queue_client, cassieq_options, tmp_path_factory):
    server = start_test_server(tmp_path_factory.mktemp("service-fuzz"), cassandra, cassieq_options)
    name = f"fuzz-{uuid.uuid4().hex[:10]}"
    key = server.admin("POST", "/accounts", name).json()["keys"]["primary"]
    auth = {"Authorization": f"Key {key}", "Content-Type": "application/json"}
    base = f"/api/v1/accounts/{name}/queues"
    assert server.call("POST", base, json.dumps({"queueName": "q"}), auth).status == 201
    for i in range(20):
        server.call("POST", f"{base}/q/messages", f"m{i}", auth)
    print(f"fuzzing with seed {SEED}, {EXAMPLES} examples per operation")
    yield server, name, key
    server.stop()


def prepare(case, live) -> None:
    """The queue routes on the live account with its key, on the queue with messages (its
    deletion on another); the admin routes with the admin key; long polls cut to 1 s."""
    server, name, key = live
    path = case.operation.path
    if path.startswith("/api/"):
        case.path_parameters = {**(case.path_parameters or {}), "account": name}
        if "queue" in case.path_parameters:
            deletes = case.method.upper() == "DELETE" and path.endswith("{queue}")
            case.path_parameters["queue"] = "other" if deletes else "q"
        case.headers = {**(case.headers or {}), "Authorization": f"Key {key}"}
        wait = (case.query or {}).get("waitSeconds")
        if isinstance(wait, int) and not isinstance(wait, bool) and wait > 1:
            case.query["waitSeconds"] = 1  # a long poll is tested elsewhere
    elif path.startswith(("/admin", "/dashboard/queues")):
        case.headers = {**(case.headers or {}), "Authorization": f"Key {server.admin_key}"}


def test_no_input_gets_a_5xx_and_every_answer_conforms(live):
    server, name, key = live
    schema = schemathesis.openapi.from_dict(server.call("GET", "/openapi.json").json())
    base_url = f"http://{LOOPBACK}:{server.port}"
    failures: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1

        @given(case=operation.as_strategy())
        @seed(SEED)
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            print_blob=True,
        )
        def fuzz(case) -> None:
            prepare(case, live)
            case.call_and_validate(base_url=base_url, checks=CHECKS, timeout=30)

        try:
            fuzz()
        except Exception as exc:  # every operation is fuzzed; all failures are reported
            # the whole chain: Hypothesis wraps what failed (a flaky failure in a group)
            text = "".join(traceback.format_exception(exc))
            for sub in getattr(exc, "exceptions", ()):
                text += "".join(traceback.format_exception(sub))
            failures.append(f"{operation.label}: {text[-4000:]}")
    print(f"{operations} operations fuzzed, {len(failures)} failed")
    assert operations > 30
    assert not failures, "\n\n".join(failures)


STEPS = int(os.environ.get("CASSIEQ_FUZZ_STEPS", "5"))


def test_deliveries_followed_to_their_acks_and_updates_get_no_5xx(live):
    """Stateful: sequences that claim messages (v1 next, v2 receive) and follow the document's
    links with the receipts they got (v1 ack and update, v2 ack and visibility)."""
    server, _, _ = live
    schema = schemathesis.openapi.from_dict(server.call("GET", "/openapi.json").json())
    base_url = f"http://{LOOPBACK}:{server.port}"

    class Deliveries(schema.as_state_machine()):  # type: ignore[misc]
        def before_call(self, case) -> None:
            prepare(case, live)

        def get_call_kwargs(self, case) -> dict:
            return {"base_url": base_url, "timeout": 30}

        def validate_response(self, response, case, additional_checks=None, **kwargs) -> None:
            case.validate_response(response, checks=CHECKS)

    print(f"stateful: seed {SEED}, {EXAMPLES} scenarios of at most {STEPS} steps")
    Deliveries.run(
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            derandomize=True,
        )
    )
