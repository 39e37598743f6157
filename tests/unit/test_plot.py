"""The demo's plot of enqueued vs acked: a PNG from watch samples, no server, no display."""

from __future__ import annotations

import pytest

from cassieq_spark.plot import enqueued_vs_acked
from cassieq_spark.watch import Sample

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_the_plot_is_a_png(tmp_path) -> None:
    samples = [
        Sample(float(t), {"queue": "q", "enqueued": 100 * t, "acked": 80 * t}) for t in range(5)
    ]
    path = enqueued_vs_acked(samples, tmp_path / "sub" / "plot.png")
    assert path == tmp_path / "sub" / "plot.png"
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 1000


def test_no_samples_no_plot(tmp_path) -> None:
    with pytest.raises(ValueError, match="no stats samples"):
        enqueued_vs_acked([], tmp_path / "plot.png")
    assert not (tmp_path / "plot.png").exists()
