"""The one line a partial check prints, and the same as data for --json.

A diff is partial when onnxruntime cannot run the unfused graph whole (runtime/coverage.py):
comparisons that need a value nothing here computes are skipped, and comparisons whose values
went through an op lower ran itself rest on lower's implementation rather than onnxruntime.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from runtime.coverage import Coverage
from runtime.report import Row, row_label

SHOWN = 3  # rows named per reason; the rest are counted


def _nodes(counts: Counter[str]) -> str:
    return ", ".join(f"{label} ({n} node{'s' if n != 1 else ''})" for label, n in counts.items())


def _named(rows: Sequence[Row]) -> str:
    names = [row_label(r) for r in rows[:SHOWN]]
    more = f" and {len(rows) - SHOWN} more" if len(rows) > SHOWN else ""
    return ", ".join(names) + more


def describe_partial(rows: Sequence[Row], cov: Coverage) -> tuple[str, dict[str, object]]:
    """What could not be checked against onnxruntime, and why: one line and its data."""
    ran = [r for r in rows if not r.skipped]
    formula = [r for r in ran if r.partial and r.reference == "float64 formula"]
    resting = [r for r in ran if r.partial and r.reference != "float64 formula"]
    parts = [f"onnxruntime cannot run the unfused graph's {_nodes(cov.not_in_ort)}"]
    if cov.lower_ran:
        rest = (f"{len(resting)} of the {len(ran)} comparisons that ran rest on that" if resting
                else "no comparison that ran rests on that")
        parts.append(f"lower ran {', '.join(cov.lower_ran)} as onnxruntime-training's CPU kernels do ({rest})")
    if formula:
        parts.append(f"{_named(formula)} held to the float64 formula: the matched subgraph holds such ops")
    by_reason: dict[str, list[Row]] = {}
    for r in rows:
        if r.skipped:
            by_reason.setdefault(r.skipped, []).append(r)
    parts += [f"not checked: {_named(skipped)}: {why}" for why, skipped in by_reason.items()]
    detail: dict[str, object] = {
        "not_run_by_onnxruntime": dict(cov.not_in_ort),
        "run_by_lower": dict(cov.lower_ran),
        "resting_on_lower": [row_label(r) for r in resting],
        "held_to_formula": [row_label(r) for r in formula],
        "skipped": [{"check": row_label(r), "why": why} for why, skipped in by_reason.items() for r in skipped],
    }
    return "; ".join(parts), detail
