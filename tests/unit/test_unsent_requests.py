"""engine.session.never_sent: which driver failures prove that no node received a request (so
it may be sent again whatever it is), and which leave its outcome unknown."""

from __future__ import annotations

import pickle

import pytest
from cassandra import OperationTimedOut
from cassandra.cluster import NoHostAvailable
from cassandra.connection import ConnectionBusy, ConnectionException, ConnectionShutdown
from cassandra.pool import NoConnectionsAvailable
from cassandra.protocol import OverloadedErrorMessage

from cassieq_spark.engine.store.failures import (
    is_shutdown_refusal,
    never_sent,
    resend_unsent,
    unsent_after_refusal,
)
from cassieq_spark.errors import CassandraUnavailableError, ConnectionFailedError


def _nha(*errors: Exception) -> NoHostAvailable:
    return NoHostAvailable(
        "Unable to complete the operation against any hosts",
        {f"127.0.0.{i + 1}:9042": e for i, e in enumerate(errors)},
    )


@pytest.mark.parametrize(
    "errors",
    [
        (),  # no host was up to try
        (ConnectionShutdown("Connection to 127.0.0.1:9042 is defunct"),),
        (ConnectionShutdown("Connection to 127.0.0.1:9042 is closed"),),
        (ConnectionException("Host has been marked down or removed"),),
        (ConnectionException("Pool is shutdown"), NoConnectionsAvailable()),
        (ConnectionBusy("busy"),),
    ],
)
def test_requests_no_node_received(errors):
    assert never_sent(_nha(*errors))


@pytest.mark.parametrize(
    "errors",
    [
        (ConnectionShutdown("[Errno 104] Connection reset by peer"),),  # in flight when it died
        (OperationTimedOut("timed out"),),
        (ConnectionShutdown("Connection to 127.0.0.1:9042 is defunct"), OperationTimedOut()),
    ],
)
def test_requests_that_may_have_applied(errors):
    assert not never_sent(_nha(*errors))


def test_the_unavailable_error_is_both_ours_and_the_drivers():
    err = CassandraUnavailableError("Cassandra at 127.0.0.1:9042 did not answer", {})
    assert isinstance(err, ConnectionFailedError) and isinstance(err, NoHostAvailable)
    assert str(err) == "Cassandra at 127.0.0.1:9042 did not answer"
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is CassandraUnavailableError and str(again) == str(err)


@pytest.mark.parametrize(
    ("errors", "delivered"),
    [
        ((), False),
        ((ConnectionException("Host has been marked down or removed"),), False),
        ((OperationTimedOut("timed out"),), True),
    ],
)
def test_the_unavailable_error_says_whether_a_node_received_the_request(errors, delivered):
    """A compare-and-set that no node received did not apply: its caller must not spend a
    serial read settling it (on a dead cluster that multiplied the time to fail)."""
    from cassandra.cluster import Cluster

    from cassieq_spark.engine.store.failures import unavailable_error

    cluster = Cluster(contact_points=["127.0.0.1"], port=1)  # never connected: no hosts known
    err = unavailable_error(cluster, _nha(*errors), "127.0.0.1:1")
    assert err.delivered is delivered
    assert pickle.loads(pickle.dumps(err)).delivered is delivered


def _host(address: str, dc: str | None, up: bool | None):
    from types import SimpleNamespace

    return SimpleNamespace(address=address, datacenter=dc, is_up=up)


def test_a_lost_local_data_center_is_named_with_the_way_out():
    """A connection with localDc uses only that data center's nodes as coordinators: when they
    are all gone its requests fail although another data center answers; the error says which
    data center, and that another localDc (or waiting) is the way out."""
    from cassieq_spark.engine.store.failures import local_dc_down

    hosts = [_host("127.0.0.1", "dc1", True), _host("127.0.0.2", "dc1", None)]
    hosts.append(_host("127.0.0.3", "dc2", False))
    text = local_dc_down(hosts, "dc2")
    assert text is not None
    assert "data center 'dc2' (127.0.0.3)" in text and "localDc set to another" in text
    assert text.endswith("(dc1)")
    assert local_dc_down(hosts, None) is None  # no localDc: the generic advice
    assert local_dc_down(hosts, "dc1") is None  # a dc1 node is up: not this
    # Every data center's nodes down: the whole cluster is gone, nothing better to say.
    assert local_dc_down([_host("127.0.0.1", "dc1", False), hosts[2]], "dc2") is None


SHUTTING_DOWN = OverloadedErrorMessage(0x1001, "Server is shutting down", None)


def test_a_refusal_of_a_node_shutting_down_proves_nothing_ran():
    assert is_shutdown_refusal(SHUTTING_DOWN)
    # The Overloaded of a compare-and-set's commit loop may follow an accepted proposal.
    assert not is_shutdown_refusal(OverloadedErrorMessage(0x1001, "Too many in flight", None))
    assert not is_shutdown_refusal(ConnectionException("Server is shutting down"))
    assert never_sent(unsent_after_refusal(SHUTTING_DOWN))
    assert not never_sent(_nha(SHUTTING_DOWN, OperationTimedOut("timed out")))


def test_a_request_every_node_refused_while_shutting_down_is_sent_again(monkeypatch):
    """Sent again after a pause (the nodes may be back: a rolling restart); when every node
    still refuses, the caller gets the unavailable error, marked as not delivered."""
    from cassieq_spark.engine.store import failures

    monkeypatch.setattr(failures, "UNSENT_RETRY_DELAYS", (0.0, 0.0))
    calls = []

    def refused_then_ok():
        calls.append(1)
        if len(calls) == 1:
            raise SHUTTING_DOWN
        return "ran"

    def unavailable(exc):
        return CassandraUnavailableError(str(exc), exc.errors, delivered=not never_sent(exc))

    assert resend_unsent(refused_then_ok, unsent_after_refusal(SHUTTING_DOWN), unavailable) == "ran"
    assert len(calls) == 2

    def always_refused():
        raise SHUTTING_DOWN

    with pytest.raises(CassandraUnavailableError) as info:
        resend_unsent(always_refused, unsent_after_refusal(SHUTTING_DOWN), unavailable)
    assert info.value.delivered is False

    def other_overload():
        raise OverloadedErrorMessage(0x1001, "Too many in flight", None)

    with pytest.raises(OverloadedErrorMessage):  # may have run: not for this path to resend
        resend_unsent(other_overload, unsent_after_refusal(SHUTTING_DOWN), unavailable)
