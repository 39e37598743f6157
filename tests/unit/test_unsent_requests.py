"""engine.session.never_sent: which driver failures prove that no node received a request (so
it may be sent again whatever it is), and which leave its outcome unknown."""

from __future__ import annotations

import pickle

import pytest
from cassandra import OperationTimedOut
from cassandra.cluster import NoHostAvailable
from cassandra.connection import ConnectionBusy, ConnectionException, ConnectionShutdown
from cassandra.pool import NoConnectionsAvailable

from cassieq_spark.engine.store.failures import never_sent
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
