"""AsyncQueueClient offers every public method of QueueClient, with the same parameters."""

import inspect

import pytest

from cassieq_spark import AsyncQueueClient, QueueClient

pytestmark = pytest.mark.unit

# Methods of the blocking client that have no asynchronous form, and why.
SYNC_ONLY = {
    "sibling": "a client for another thread; the async client pools its own",
    "from_session": "wraps a session the caller made; the async client connects itself",
}


# Defaults that differ on purpose: the async worker runs handlers as tasks, not threads.
OWN_DEFAULTS = {("worker", "concurrency")}


def _public(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(fn)
        for name, fn in inspect.getmembers(cls, callable)
        if not name.startswith("_") and name not in SYNC_ONLY
    }


def test_every_public_method_of_the_blocking_client_has_an_async_form() -> None:
    missing = sorted(set(_public(QueueClient)) - set(_public(AsyncQueueClient)))
    assert not missing, f"AsyncQueueClient lacks {missing}"


@pytest.mark.parametrize("name", sorted(_public(QueueClient)))
def test_each_async_method_takes_the_same_parameters(name: str) -> None:
    sync = _public(QueueClient)[name]
    asyn = _public(AsyncQueueClient).get(name)
    if asyn is None:
        pytest.fail(f"AsyncQueueClient lacks {name}")
    assert list(asyn.parameters) == list(sync.parameters), name
    for param in sync.parameters.values():
        if (name, param.name) in OWN_DEFAULTS:
            continue
        other = asyn.parameters[param.name].default
        # UNSET sentinels are compared by identity: a default value in their place would make
        # a setting left out look given (create_queue(exist_ok=True) compares what is given).
        assert other is param.default or other == param.default, (name, param.name)
