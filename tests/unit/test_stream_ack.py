"""How the stream's ack cuts a batch's id range into scans (runs of buckets per statement)."""

from __future__ import annotations

from cassieq_spark.engine.stream.ack import SCAN_MAX_BUCKETS, SCAN_MAX_IDS, scan_ranges, uncovered


def _ids(scans, bucket_size):
    """Every id the scans read: each bucket of a scan clipped to the scan's range."""
    out = []
    for buckets, lo, hi in scans:
        for b in buckets:
            out.extend(range(max(lo, b * bucket_size), min(hi, (b + 1) * bucket_size)))
    return out


def test_one_scan_for_a_batch_up_to_the_limits():
    assert scan_ranges(150, 5_000, [], 100) == [(list(range(1, 50)), 150, 5_000)]
    assert scan_ranges(0, 0, [], 100) == []


def test_scans_read_every_id_outside_the_excluded_ranges_once():
    for lo, hi, excluded, size in [
        (0, 1_000, [(10, 20), (500, 700)], 100),
        (7, 123_456, [(99_990, 100_010)], 1_000),
        (0, 350_000, [], 100_000),
        (5, 20_000, [(0, 7), (19_000, 30_000)], 10),
    ]:
        scans = scan_ranges(lo, hi, excluded, size)
        expected = [i for a, b in uncovered(lo, hi, excluded) for i in range(a, b)]
        assert _ids(scans, size) == expected
        for buckets, slo, shi in scans:
            assert len(buckets) <= SCAN_MAX_BUCKETS
            assert shi - slo <= max(SCAN_MAX_IDS, size)
            assert buckets == list(range(buckets[0], buckets[-1] + 1))


def test_big_batches_take_one_scan_per_limit():
    assert len(scan_ranges(0, 1_000_000, [], 1_000)) == 10  # 100 buckets each
    assert len(scan_ranges(0, 20_000, [], 10)) == 20  # 100 buckets of 10 ids each
    assert len(scan_ranges(0, 300_000, [], 100_000)) == 3  # 100,000 ids each
