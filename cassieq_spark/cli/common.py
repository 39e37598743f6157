"""What every command group of ``cassieq`` shares: the help's epilog, the flag types, the JSON
output, and the outcome that ends a command with a status but no error."""

from __future__ import annotations

import argparse
import json

from ..config.flags import (
    EXIT_EMPTY,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_STALE,
    EXIT_USAGE,
)
from ..engine.core.buckets import MAX_BUCKET_SIZE
from ..validate import (
    MAX_BATCH,
    MAX_DELAY_SECONDS,
    MAX_DELIVERY_COUNT,
    MAX_HEADERS_BYTES,
    MAX_HEADERS_COUNT,
    MAX_MESSAGE_TTL_SECONDS,
    MAX_REPAIR_TIMEOUT_SECONDS,
    MAX_REPLICATION_FACTOR,
    MAX_VISIBILITY_SECONDS,
    MAX_WAIT_SECONDS,
    MAX_WATCH_INTERVAL_SECONDS,
    MIN_VISIBILITY_SECONDS,
    MIN_WATCH_INTERVAL_SECONDS,
    integer_text,
    plain_number_text,
)

DEFAULT_WATCH_INTERVAL = 2.0

EPILOG = f"""\
exit statuses:
  {EXIT_OK}  success
  {EXIT_ERROR}  error (connection, schema not bootstrapped, ...); one line on stderr
  {EXIT_USAGE}  bad command line or value (out of the limits below, not a receipt, ...)
  {EXIT_EMPTY}  get: the queue has no visible message (nothing is printed on stdout)
  {EXIT_NOT_FOUND}  the queue does not exist
  {EXIT_STALE}  ack/change-visibility: the receipt is stale (acked or redelivered since)
  Ctrl-C ends `stats --watch` with {EXIT_OK}; anything else it interrupts ends with {EXIT_INTERRUPTED}

limits (the same in the Python client, the Spark options and the repair job):
  queue names   1-200 of letters, digits, '_', '-', '.', starting with a letter or digit
  keyspace      1-48 of letters, digits, '_', starting with a letter
  --delay       0 to {MAX_DELAY_SECONDS:g} s (12 h)     --visibility-timeout  {MIN_VISIBILITY_SECONDS:g} to {MAX_VISIBILITY_SECONDS:g} s (12 h)
  --repair-timeout  > 0 to {MAX_REPAIR_TIMEOUT_SECONDS:g} s (24 h)   --message-ttl  1 to {MAX_MESSAGE_TTL_SECONDS} s (20 years)
  get --max  1 to {MAX_BATCH}     get --wait  0 to {MAX_WAIT_SECONDS:g} s
  --max-delivery-count  1 to {MAX_DELIVERY_COUNT}        --bucket-size  1 to {MAX_BUCKET_SIZE}
  payload       up to the queue's max_payload_bytes (default 1 MiB, at most 15 MiB)
  headers       at most {MAX_HEADERS_COUNT} entries and {MAX_HEADERS_BYTES} bytes (put --header, Python client, Spark sink)
  --dedup-id    1-128 printable ASCII characters, no spaces; the same id within 5 minutes enqueues once
  --url         cassieq://[user@]host[,host...][:port]/keyspace (no password: --password-file)
  --replication-factor  1 to {MAX_REPLICATION_FACTOR}, and no more than the cluster's nodes can serve
  stats --interval  {MIN_WATCH_INTERVAL_SECONDS:g} to {MAX_WATCH_INTERVAL_SECONDS:g} s (default {DEFAULT_WATCH_INTERVAL:g})   stats --count  >= 1
  --replication  JSON map: SimpleStrategy + replication_factor, or NetworkTopologyStrategy + replicas per data center (1 to {MAX_REPLICATION_FACTOR} each)

connection flags fall back to CASSIEQ_URL, CASSIEQ_CONTACT_POINTS, CASSIEQ_PORT, CASSIEQ_KEYSPACE,
CASSIEQ_LOCAL_DC, CASSIEQ_USERNAME, CASSIEQ_PASSWORD (or CASSIEQ_PASSWORD_FILE), CASSIEQ_SSL,
CASSIEQ_SSL_CA_FILE, CASSIEQ_SSL_CERT_FILE, CASSIEQ_SSL_KEY_FILE, CASSIEQ_SSL_VERIFY, CASSIEQ_CONSISTENCY.
"""


class CommandExit(Exception):
    """A non-error outcome that still ends with a non-zero status (empty queue, stale receipt)."""

    def __init__(self, status: int, message: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message


def number_flag(text: str) -> float:
    """A number flag: what ``float`` reads, from ASCII digits only ('1_5' is not 15)."""
    try:
        if plain_number_text(text):
            return float(text)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(
        f"expected a number written with ASCII digits (no '_'), got {text!r}"
    )


def integer_flag(text: str) -> int:
    """A whole-number flag, from ASCII digits only ('1_000' and '²' are refused)."""
    number = integer_text(text)
    if number is None:
        raise argparse.ArgumentTypeError(
            f"expected a whole number written with ASCII digits, got {text!r}"
        )
    return number


def dump(obj: object) -> None:
    """One JSON line on stdout (what a script reads)."""
    print(json.dumps(obj, default=str, sort_keys=True))
