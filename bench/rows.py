"""One row of a run's results table, shared by the main report and the SCC comparison."""

from __future__ import annotations


def table_row(
    suite, what, summ, unit="msg/s", base=None, base_name=None, ratio=None, digits=0
) -> dict:
    """``summ``/``base``: a measurement's summary (median, min, max) or None if not measured."""
    return {
        "suite": suite,
        "what": what,
        "unit": unit,
        "median": summ.get("median") if summ else None,
        "min": summ.get("min") if summ else None,
        "max": summ.get("max") if summ else None,
        "baseline": base_name,
        "baseline_median": base.get("median") if base else None,
        "ratio": ratio,
        "digits": digits,
    }
