"""Keyspaces as an earlier schema version made them, for the tests of ``bootstrap``'s
migrations: every migration before the one under test applied, and that version recorded."""

from __future__ import annotations

from cassieq_spark.engine.store import schema


def keyspace_before(session, keyspace: str, migration) -> int:
    """Make ``keyspace`` (already created) what the bootstrap of the version before
    ``migration`` left; returns that version."""
    version_of = next(v for v, m in schema.MIGRATIONS.items() if m == migration)
    previous = max(v for v in schema.MIGRATIONS if v < version_of)
    for version in sorted(v for v in schema.MIGRATIONS if v <= previous):
        for statement in schema.MIGRATIONS[version]:  # what the previous bootstrap applied
            session.execute(statement.replace("{ks}.", f"{keyspace}."))
    session.execute(
        f"INSERT INTO {keyspace}.schema_version (component, version) VALUES ('cassieq', %s)",
        (previous,),
    )
    return previous
