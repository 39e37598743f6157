"""The application role: what the sink, the source, the repair job and the client need, no more.

Everything the queue does at run time reads and writes rows (queues are rows of the ``queues``
table, so creating or deleting a queue is a write too). SELECT and MODIFY on the keyspace are
therefore enough; schema changes (bootstrap, migrations) and role management stay with an admin.
"""

from __future__ import annotations

import logging
import time

from cassandra import AlreadyExists, InvalidRequest
from cassandra.cluster import Session
from cassandra.protocol import OverloadedErrorMessage

from ...errors import ConfigError
from ...validate import keyspace_name, role_name

log = logging.getLogger(__name__)

PASSWORD_CHANGE_WAIT = 6.0  # Cassandra refuses a second password change within 5 s

APP_PERMISSIONS = ("SELECT", "MODIFY")


def create_app_role(session: Session, keyspace: str, role: str, password: str) -> None:
    """Create (or update the password of) ``role`` and grant it exactly APP_PERMISSIONS."""
    role_name(role)
    keyspace_name(keyspace)
    if not password:
        raise ConfigError("the app role's password is empty: give a non-empty password")
    try:
        session.execute(f'CREATE ROLE "{role}" WITH LOGIN = true AND PASSWORD = %s', (password,))
    except (AlreadyExists, InvalidRequest) as exc:  # Cassandra says InvalidRequest for roles
        if "already exists" not in str(exc):
            raise
        _set_password(session, role, password)
    for permission in APP_PERMISSIONS:
        session.execute(f'GRANT {permission} ON KEYSPACE "{keyspace}" TO "{role}"')
    log.info("role %s may %s on keyspace %s", role, " and ".join(APP_PERMISSIONS), keyspace)


def _set_password(session: Session, role: str, password: str) -> None:
    deadline = time.monotonic() + PASSWORD_CHANGE_WAIT
    while True:
        try:
            session.execute(f'ALTER ROLE "{role}" WITH LOGIN = true AND PASSWORD = %s', (password,))
            return
        except (OverloadedErrorMessage, InvalidRequest) as exc:
            if "can only be changed every" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
