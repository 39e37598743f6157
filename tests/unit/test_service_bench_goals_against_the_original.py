"""The service suite judges its goals against the original server from the same run's medians:
ours per instance over the original's msg/s, put and get+ack >= 2x, batch receive+ack >= 10x
the original's get+ack; the report states each ratio and whether it is met."""

from __future__ import annotations

import pytest

from bench import service


def _path(rate: float, n: int = 1) -> dict:
    one = {"median": rate, "min": rate, "max": rate}
    return {
        "rate": one,
        "rate_per_instance": {**one, "median": rate / n},
        "p50_ms": {"median": 10.0},
        "p99_ms": {"median": 100.0},
    }


def _entry(original_status: str = "ok") -> dict:
    ours = {
        "1": {"put": _path(300), "get_ack": _path(100), "batch": _path(1000)},
        "2": {"put": _path(400, 2), "get_ack": _path(180, 2), "batch": _path(1800, 2)},
    }
    original = {"status": original_status, "jar": "core.jar", "java": "openjdk 17"}
    if original_status == "ok":
        original |= {"put": _path(100), "get_ack": _path(80)}
    else:
        original["reason"] = "no original CassieQ checkout given"
    entry = {
        "status": "ok",
        "size": {"threads": 8, "put": 1, "get_ack": 1, "batch": 1, "seconds": 1},
        "message_bytes": 100,
        "instances": ours,
        "two_vs_one": {"put": 1.3},
        "batch_vs_get_ack": 10.0,
        "original": original,
    }
    if original_status == "ok":
        entry["vs_original"] = service.against_original(ours, original)
    return entry


def test_each_goal_is_ours_per_instance_over_the_originals_median():
    vs = _entry()["vs_original"]
    assert vs["put_vs_put"]["ratio_1_instance"] == pytest.approx(3.0)
    assert vs["put_vs_put"]["ratio_2_instances"] == pytest.approx(2.0)
    assert vs["put_vs_put"]["met"] is True
    assert vs["get_ack_vs_get_ack"]["ratio_1_instance"] == pytest.approx(1.25)
    assert vs["get_ack_vs_get_ack"]["met"] is False
    assert vs["batch_vs_get_ack"]["ratio_1_instance"] == pytest.approx(12.5)
    assert vs["batch_vs_get_ack"]["goal"] == 10.0 and vs["batch_vs_get_ack"]["met"] is True


def test_the_report_states_every_goal_and_whether_it_is_met():
    text = "\n".join(service.markdown(_entry()))
    assert "| put >= 2x the original's put | 3.00x | 2.00x | yes |" in text
    assert "| get+ack >= 2x the original's get+ack | 1.25x | 1.12x | no |" in text
    assert "batch receive+ack (100) >= 10x the original's get+ack | 12.50x" in text


def test_without_the_original_the_report_says_why():
    text = "\n".join(service.markdown(_entry("skipped")))
    assert "Original CassieQ server: skipped: no original CassieQ checkout given" in text
    assert "goal" not in text
