"""Bucket math: ids map to fixed-size buckets, one Cassandra partition each.

Pure functions, no I/O. ``bucket = id // bucket_size``.
"""

from __future__ import annotations

from collections.abc import Iterator

MIN_BUCKET_SIZE = 1
MAX_BUCKET_SIZE = 100_000
DEFAULT_BUCKET_SIZE = 1_000


def bucket_of(message_id: int, bucket_size: int) -> int:
    if message_id < 0:
        raise ValueError(f"message ids are non-negative, got {message_id}")
    return message_id // bucket_size


def bucket_start(bucket: int, bucket_size: int) -> int:
    """First id of ``bucket``."""
    return bucket * bucket_size


def bucket_end(bucket: int, bucket_size: int) -> int:
    """One past the last id of ``bucket``."""
    return (bucket + 1) * bucket_size


def split_by_bucket(lo: int, hi: int, bucket_size: int) -> Iterator[tuple[int, int, int]]:
    """Yield ``(bucket, lo, hi)`` slices covering the half-open id range ``[lo, hi)``."""
    pos = lo
    while pos < hi:
        b = pos // bucket_size
        end = min(hi, bucket_end(b, bucket_size))
        yield b, pos, end
        pos = end


def validate_bucket_size(bucket_size: int) -> int:
    if (
        not isinstance(bucket_size, int)
        or isinstance(bucket_size, bool)
        or not MIN_BUCKET_SIZE <= bucket_size <= MAX_BUCKET_SIZE
    ):
        from ...errors import ConfigError

        raise ConfigError(
            f"bucket size must be an integer from {MIN_BUCKET_SIZE} to {MAX_BUCKET_SIZE}, "
            f"got {bucket_size!r}"
        )
    return bucket_size
