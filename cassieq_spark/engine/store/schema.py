"""The CQL schema and its bootstrap/migration.

Design notes (why the tables look like this):

* Every per-queue table is keyed by the queue *incarnation* (``queue_id``), not the name, so a
  deleted and re-created queue never sees the old messages.
* ``monoton`` holds the id counter as a static column and the open id reservations as rows of
  the same partition. A conditional batch on that one partition moves the counter *and* records
  the reservation atomically, so anyone who sees the counter also sees every reservation below
  it: readers can tell which ids may still be in flight.
* ``messages`` is bucketed: one partition per ``id // bucket_size``. Nothing on the hot path
  deletes single rows; whole partitions leave when repair reclaims them.
* Non-frozen collections are avoided: an INSERT of one writes a tombstone first.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cassandra import InvalidRequest, Unavailable
from cassandra.cluster import NoHostAvailable, Session
from cassandra.query import SimpleStatement

from ... import validate
from ...errors import KeyspaceReplicationError, SchemaNotBootstrappedError

if TYPE_CHECKING:
    from .session import Connection

log = logging.getLogger(__name__)

SCHEMA_VERSION = 12

# The `lo` of a monoton row that is always there, after every reservation: reading it returns
# the static `next` without walking the rows (and tombstones) of the partition, and a range
# read from any `lo` up includes it, so `next` always comes back with the reservations.
SENTINEL_LO = 2**62

# The HTTP service's tables, one self-contained step (accounts, their sealed keys, the repair
# lease of the service instances); no other table refers to them.
SERVICE_ACCOUNTS_MIGRATION: list[str] = [
    """CREATE TABLE IF NOT EXISTS {ks}.service_accounts (
        account text PRIMARY KEY,
        created_at timestamp)""",
    """CREATE TABLE IF NOT EXISTS {ks}.service_account_keys (
        account text,
        key_name text,
        sealed blob,
        created_at timestamp,
        PRIMARY KEY (account, key_name))""",
    """CREATE TABLE IF NOT EXISTS {ks}.service_leases (
        name text PRIMARY KEY,
        owner text)""",
]

# Message groups (see engine/consume/groups.py): the group of a message in its own column, which
# the scans read (they never read headers), and per group the last message a reader set out to
# deliver (``head``) and the last one known finished (``done``), both written with the message
# id as their timestamp so that the largest id wins without a Paxos round. One partition per
# queue: a reader reads the heads of a stretch's groups in one query.
GROUPS_MIGRATION: list[str] = [
    "ALTER TABLE {ks}.messages ADD IF NOT EXISTS grp text",
    """CREATE TABLE IF NOT EXISTS {ks}.group_heads (
        queue_id uuid,
        grp text,
        head bigint,
        done bigint,
        PRIMARY KEY (queue_id, grp))
        WITH default_time_to_live = 1209600""",
]

# Tallies of a stream batch's reads (see engine/stream/tally.py): per task that read an id-path
# range whole, how many plain messages it delivered and the ids of the others, so the ack of the
# batch reads one partition instead of scanning the batch's rows. Hints with a short TTL.
STREAM_TALLIES_TTL_SECONDS = 3600
STREAM_TALLIES_MIGRATION: list[str] = [
    f"""CREATE TABLE IF NOT EXISTS {{ks}}.stream_tallies (
        queue_id uuid,
        run text,
        end_ts bigint,
        lo bigint,
        hi bigint,
        plain int,
        others list<bigint>,
        PRIMARY KEY ((queue_id, run, end_ts), lo))
        WITH default_time_to_live = {STREAM_TALLIES_TTL_SECONDS}""",
]

# Signed pop receipts (see engine/core/receipts.py): each queue incarnation's random key, with
# which its receipts are tagged, stored with its definition (every client reads that before an
# ack already). A row without one gets it from the first reader (queues.get_queue).
RECEIPT_KEY_MIGRATION: list[str] = ["ALTER TABLE {ks}.queues ADD IF NOT EXISTS receipt_key blob"]

# Each entry is applied once, in order; ``IF NOT EXISTS`` keeps re-runs harmless.
MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE IF NOT EXISTS {ks}.queues (
            name text PRIMARY KEY,
            queue_id uuid,
            bucket_size int,
            max_delivery_count int,
            visibility_timeout double,
            repair_timeout double,
            dead_letter_queue text,
            message_ttl int,
            max_payload_bytes int,
            created_at timestamp)""",
        """CREATE TABLE IF NOT EXISTS {ks}.monoton (
            queue_id uuid,
            lo bigint,
            next bigint static,
            hi bigint,
            created_at timestamp,
            closed boolean,
            released boolean,
            owner text,
            PRIMARY KEY (queue_id, lo))
            WITH gc_grace_seconds = 3600""",
        """CREATE TABLE IF NOT EXISTS {ks}.reservation_keys (
            queue_id uuid,
            key text,
            lo bigint,
            hi bigint,
            PRIMARY KEY ((queue_id, key)))
            WITH default_time_to_live = 1209600""",
        """CREATE TABLE IF NOT EXISTS {ks}.messages (
            queue_id uuid,
            bucket bigint,
            id bigint,
            payload blob,
            headers frozen<map<text, text>>,
            enqueued_at timestamp,
            visible_at timestamp,
            version int,
            deliveries int,
            invisible_until timestamp,
            acked boolean,
            dead boolean,
            PRIMARY KEY ((queue_id, bucket), id))""",
        """CREATE TABLE IF NOT EXISTS {ks}.pointers (
            queue_id uuid PRIMARY KEY,
            reader bigint,
            repair bigint,
            timer_slot bigint,
            lease_owner text,
            lease_until timestamp)""",
        """CREATE TABLE IF NOT EXISTS {ks}.timers (
            queue_id uuid,
            slot bigint,
            id bigint,
            PRIMARY KEY ((queue_id, slot), id))
            WITH default_time_to_live = 1209600""",
        """CREATE TABLE IF NOT EXISTS {ks}.timer_slots (
            queue_id uuid,
            slot bigint,
            PRIMARY KEY (queue_id, slot))
            WITH default_time_to_live = 1209600""",
        """CREATE TABLE IF NOT EXISTS {ks}.skipped (
            queue_id uuid,
            lo bigint,
            hi bigint,
            skipped_at timestamp,
            done boolean,
            republished int,
            lost int,
            PRIMARY KEY (queue_id, lo))""",
        """CREATE TABLE IF NOT EXISTS {ks}.counters (
            queue_id uuid PRIMARY KEY,
            enqueued counter,
            acked counter,
            dead_lettered counter,
            dropped counter,
            republished counter,
            lost counter)""",
        """CREATE TABLE IF NOT EXISTS {ks}.schema_version (
            component text PRIMARY KEY,
            version int,
            applied_at timestamp)""",
    ],
    # Readers hand an abandoned reservation to repair with a compare-and-set on its row, and a
    # late writer closes it with one, so the two can never both win (see monoton.py).
    2: ["ALTER TABLE {ks}.monoton ADD IF NOT EXISTS skipped boolean"],
    # Which repair marked a range done: after a lost reply, the one that did counts it.
    3: ["ALTER TABLE {ks}.skipped ADD IF NOT EXISTS done_by text"],
    # Where a message marked dead went: a dead-letter copy or a republished copy is written
    # *after* the compare-and-set that takes the original out of the queue, so a crash in
    # between leaves this marker for the timer path or repair to finish (see deadletter.py).
    4: ["ALTER TABLE {ks}.messages ADD IF NOT EXISTS moved text"],
    # Who made the current delivery: after a lost reply, two consumers that claimed one
    # message with the same due time (same millisecond) could not tell whose claim applied.
    5: ["ALTER TABLE {ks}.messages ADD IF NOT EXISTS claimed_by text"],
    # Ranges repair counted ids of as lost, kept past the range's own row (which goes with its
    # bucket, often in the same pass) so a streaming query can report them (failOnDataLoss).
    # Written once per lost range by repair, read once per trigger: off the hot path.
    6: [
        """CREATE TABLE IF NOT EXISTS {ks}.lost_ranges (
            queue_id uuid,
            lo bigint,
            hi bigint,
            lost int,
            ids list<bigint>,
            cause text,
            counted_at timestamp,
            reported_by text,
            PRIMARY KEY (queue_id, lo))
            WITH default_time_to_live = 1209600"""
    ],
    # Which runs of a streaming query read a partition of a batch: a batch Spark replays after
    # a restart delivers its messages once more, and the count of those runs is their delivery
    # count (see stream_deliveries.py). One row per partition and run; rows expire by TTL.
    7: [
        """CREATE TABLE IF NOT EXISTS {ks}.stream_reads (
            queue_id uuid,
            part text,
            run text,
            PRIMARY KEY ((queue_id, part), run))
            WITH default_time_to_live = 1209600"""
    ],
    # The HTTP service's accounts (cassieq_spark/service): an account row, its keys sealed
    # under a server-side secret that is never stored in Cassandra (reading the table gives no
    # usable key), and the lease that lets one service instance at a time run repair.
    8: SERVICE_ACCOUNTS_MIGRATION,
    # Queue settings that change after creation (``queues.update_queue``): each update is a
    # compare-and-set on ``settings_version``, so an update that checked the settings it read
    # (a dead-letter chain without a cycle) never writes over one that changed them since;
    # ``updated_at`` says when they last changed. A row without them was never updated.
    9: [
        "ALTER TABLE {ks}.queues ADD IF NOT EXISTS settings_version int",
        "ALTER TABLE {ks}.queues ADD IF NOT EXISTS updated_at timestamp",
    ],
    # Message groups: ordered delivery per key, one message of a group in flight at a time.
    10: GROUPS_MIGRATION,
    # Stream batch read tallies: acks that do not scan the batch's rows.
    11: STREAM_TALLIES_MIGRATION,
    # Signed pop receipts: a receipt carries a tag no one can derive from ids.
    12: RECEIPT_KEY_MIGRATION,
}


def _replicas(strategy) -> dict[str | None, int]:
    """Replicas per data center of a driver replication strategy (None: anywhere)."""
    factors = getattr(strategy, "dc_replication_factors", None)
    if factors is not None:
        out = {}
        for dc, rf in factors.items():
            try:
                out[dc] = int(str(rf).split("/")[0])
            except ValueError:
                continue
        return out
    rf = getattr(strategy, "replication_factor", None)
    return {None: int(rf)} if rf is not None else {}


def _describe(replicas: dict[str | None, int]) -> str:
    if set(replicas) == {None}:
        return f"{{'class': 'SimpleStrategy', 'replication_factor': {replicas[None]}}}"
    dcs = ", ".join(f"'{dc}': {rf}" for dc, rf in sorted(replicas.items(), key=str))
    return f"{{'class': 'NetworkTopologyStrategy', {dcs}}}"


def _unservable(session: Session, replicas: dict[str | None, int]) -> str | None:
    """Why the live nodes cannot give a quorum of ``replicas`` (every read and write of the
    queue needs one), or None."""
    hosts = list(session.cluster.metadata.all_hosts())
    for dc, rf in replicas.items():
        if rf < 1:
            continue
        members = [h for h in hosts if dc is None or h.datacenter == dc]
        up = [h for h in members if h.is_up is not False]
        need = rf // 2 + 1
        where = "the cluster" if dc is None else f"data center {dc!r}"
        if rf > len(members) or need > len(up):
            return (
                f"replication factor {rf} needs {rf} nodes in {where} ({need} up for a quorum); "
                f"it has {len(members)} ({len(up)} up)"
            )
    return None


def create_keyspace(
    session: Session,
    keyspace: str,
    replication_factor: int | None = 1,
    replication: dict[str | None, int] | None = None,
) -> None:
    """Create the keyspace unless it exists: SimpleStrategy with ``replication_factor``
    replicas, or ``replication`` (replicas per data center, from ``validate.replication``;
    ``{None: n}`` is SimpleStrategy). A replication the live nodes cannot serve is refused
    before anything is created; an existing keyspace with another replication than the one
    asked for is an error that says how to change it (neither given: no check)."""
    asked = replication is not None or replication_factor is not None
    if replication is None:
        rf = 1 if replication_factor is None else validate.replication_factor(replication_factor)
        replication = {None: rf}
    flag = "--replication" if set(replication) != {None} else "--replication-factor"
    ks = session.cluster.metadata.keyspaces.get(keyspace)
    if ks is None:
        session.cluster.refresh_schema_metadata()
        ks = session.cluster.metadata.keyspaces.get(keyspace)
    if ks is not None:
        have = _replicas(ks.replication_strategy)
        if asked and have != replication:
            wanted = (
                f"the replication factor {replication[None]}"
                if set(replication) == {None}
                else _describe(replication)
            )
            raise KeyspaceReplicationError(
                f"keyspace {keyspace!r} exists with replication {_describe(have)}, not "
                f"{wanted} asked for; bootstrap does not change it: run "
                f"ALTER KEYSPACE {keyspace} WITH replication = {_describe(replication)} in "
                f"cqlsh, then `nodetool repair` (or leave out {flag} to keep it)"
            )
        return
    why = _unservable(session, replication)
    if why:
        raise KeyspaceReplicationError(
            f"cannot create keyspace {keyspace!r}: {why}; nothing was created. Use a "
            f"replication the cluster can serve ({flag}), or add nodes"
        )
    session.execute(
        f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = {_describe(replication)}"
    )


def check_servable(session: Session, keyspace: str) -> None:
    """A keyspace whose replication the live nodes cannot serve fails every read and write
    of the queue: say so, and how to fix it, instead of the driver's NoHostAvailable."""
    ks = session.cluster.metadata.keyspaces.get(keyspace)
    if ks is None:
        return
    replicas = _replicas(ks.replication_strategy)
    why = _unservable(session, replicas)
    if why:
        raise KeyspaceReplicationError(
            f"keyspace {keyspace!r} has replication {_describe(replicas)}, which the cluster "
            f"cannot serve: {why}. Change it with ALTER KEYSPACE {keyspace} WITH replication = "
            f"{_describe({k: min(v, 1) for k, v in replicas.items()})} (or as many replicas as "
            "there are nodes), or bring the nodes up; then run `cassieq bootstrap` again"
        )


_VERSION_CQL = "SELECT version FROM {ks}.schema_version WHERE component = 'cassieq'"


def current_version(session: Session, keyspace: str) -> int:
    """The recorded schema version, or 0 when the tables are not there."""
    # Asked of the cluster, not of this session's metadata, which can lag behind tables that
    # another session (or an earlier, failed bootstrap) created.
    try:
        # Idempotent, so the retry policy may send it to the next host when a connection dies
        # under it (a node killed): otherwise the caller gets a bare ConnectionShutdown.
        row = session.execute(
            SimpleStatement(
                f"SELECT version FROM {keyspace}.schema_version WHERE component = 'cassieq'",
                is_idempotent=True,
            )
        ).one()
    except InvalidRequest:  # no such keyspace or table
        return 0
    return row.version if row else 0


def require_keyspace(session: Session, keyspace: str) -> None:
    """For a bootstrap that creates tables only: the keyspace must exist already."""
    if session.cluster.metadata.keyspaces.get(keyspace) is None:
        session.cluster.refresh_schema_metadata()
    if session.cluster.metadata.keyspaces.get(keyspace) is None:
        raise SchemaNotBootstrappedError(
            f"keyspace {keyspace!r} does not exist, and bootstrap --no-create (tables_only) "
            "creates tables only: create the keyspace where this service makes keyspaces "
            "(Astra: the database's Add Keyspace), then run bootstrap again"
        )


def bootstrap(session: Session, keyspace: str) -> int:
    """Apply every migration newer than the recorded version. Idempotent. Returns the version."""
    if session.cluster.metadata.keyspaces.get(keyspace) is None:
        session.cluster.refresh_schema_metadata()
    if session.cluster.metadata.keyspaces.get(keyspace) is None:
        raise SchemaNotBootstrappedError(
            f"keyspace {keyspace!r} does not exist; create it first, or bootstrap with "
            "create_keyspace=True (`cassieq bootstrap --create-keyspace`)"
        )
    have = _version(session, keyspace)
    if have < SCHEMA_VERSION:
        # Writes ahead: refuse them with advice rather than half-apply them (C87).
        check_servable(session, keyspace)
    if have == 0 and "queues" in session.cluster.metadata.keyspaces[keyspace].tables:
        # An earlier bootstrap created tables but never recorded a version (it failed in
        # between): every migration is idempotent, so running them all completes it.
        log.warning("keyspace %s was bootstrapped half-way; completing it", keyspace)
    for version in sorted(MIGRATIONS):
        if version <= have:
            continue
        for statement in MIGRATIONS[version]:
            session.execute(statement.replace("{ks}.", f"{keyspace}."), timeout=60)
        record_version(session, keyspace, version)
        log.info("schema of keyspace %s migrated to version %d", keyspace, version)
    session.cluster.control_connection.wait_for_schema_agreement()
    if have < SCHEMA_VERSION:
        # Tables created here, or before by a failed bootstrap in another session, may not
        # have reached this session's view: later version checks read it.
        session.cluster.refresh_schema_metadata()
    return max(have, SCHEMA_VERSION)


def record_version(session: Session, keyspace: str, version: int) -> None:
    """Record that migration ``version`` is applied, never moving the recorded version back.

    Several processes may bootstrap one keyspace at once (service instances started with
    ``--bootstrap``, test workers): one that read an older version runs the later migrations
    again (each is idempotent) and records each step as it goes. A plain write of its step 7
    after another process recorded 10 would make every client refuse the keyspace as not
    bootstrapped until the slow one finished; compare-and-sets keep the highest version.
    """
    table = f"{keyspace}.schema_version"
    rs = session.execute(
        f"INSERT INTO {table} (component, version, applied_at) "
        "VALUES ('cassieq', %s, toTimestamp(now())) IF NOT EXISTS",
        (version,),
        timeout=60,
    )
    while not rs.was_applied:
        have = rs.one().version  # the recorded version the compare-and-set found
        if have is not None and have >= version:
            return
        rs = session.execute(
            f"UPDATE {table} SET version = %s, applied_at = toTimestamp(now()) "
            "WHERE component = 'cassieq' IF version = %s",
            (version, have),
            timeout=60,
        )


def _version(session: Session, keyspace: str) -> int:
    """:func:`current_version` for bootstrap; a keyspace the cluster cannot serve is explained,
    not a driver's NoHostAvailable."""
    try:
        return current_version(session, keyspace)
    except (NoHostAvailable, Unavailable):
        check_servable(session, keyspace)
        raise


def _more_replicas_than_nodes(session: Session, keyspace: str) -> bool:
    ks = session.cluster.metadata.keyspaces.get(keyspace)
    if ks is None:
        return False
    hosts = list(session.cluster.metadata.all_hosts())
    return any(
        rf > sum(1 for h in hosts if dc is None or h.datacenter == dc)
        for dc, rf in _replicas(ks.replication_strategy).items()
    )


def require_schema(conn: Connection) -> None:
    """Refuse to work on a keyspace that is not bootstrapped. Read through ``conn``, so a
    request no node received is sent again and an outage is a CassandraUnavailableError; a
    keyspace with more replicas than nodes (a setup to fix, not an outage) is explained."""
    try:
        row = conn.execute(_VERSION_CQL).one()
        version = row.version if row else 0
    except InvalidRequest:  # no such keyspace or table
        version = 0
    except (NoHostAvailable, Unavailable):
        if _more_replicas_than_nodes(conn.session, conn.keyspace):
            check_servable(conn.session, conn.keyspace)
        raise
    if version < SCHEMA_VERSION:
        raise SchemaNotBootstrappedError(
            f"the cassieq schema is not bootstrapped in keyspace {conn.keyspace!r}; run "
            "`cassieq bootstrap` (or QueueClient.bootstrap()) first"
        )
