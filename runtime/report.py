"""The diff report: rows per graph output and per fused node, as a terminal table and as JSON."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from lowering.terminal import printable
from runtime.precision import Comparison

NAME_WIDTH = 40  # the table's name column; the failure lines below it show up to 80 characters
NOTE_WIDTH = 400  # a note may quote a kernel error that names a node


@dataclass
class Row:
    kind: str  # "output" (a graph output), "update" (an input a node writes in place) or "node" (a fused node)
    name: str  # output, input or node name: text from the model, shown escaped
    reference: str  # what the golden was: "unfused graph", "matched subgraph", "float64 formula"
    comparison: Comparison
    op_type: str = ""
    skipped: str = ""  # why the comparison could not run (status SKIP); "" when it ran
    partial: str = ""  # why the check falls short of onnxruntime on the unfused graph; "" when it does not
    checked: str = ""  # a fused node inside a body: what its row compares ("checked in 100 iterations of ...")

    @property
    def status(self) -> str:
        return "SKIP" if self.skipped else "PASS" if self.comparison.passed else "FAIL"

    def to_json(self) -> dict[str, object]:
        d = self.comparison.to_json()
        d.update(kind=self.kind, name=self.name, op_type=self.op_type, reference=self.reference,
                 status=self.status, skipped=self.skipped or None, partial=self.partial or None)
        if self.skipped:  # nothing was compared: no dtype, shape or threshold either
            d.update(dtype=None, shape=None, threshold=None)
        if self.checked:
            d["checked"] = self.checked
        return d


@dataclass
class DiffReport:
    unfused: str
    fused: str
    backend: str
    target: str
    inputs: str  # "seed 0" or the .npz path
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    partial: str = ""  # one line: what could not be checked against onnxruntime, and why ("" for a full check)
    partial_detail: dict[str, object] = field(default_factory=dict)  # the same as data, for --json

    @property
    def passed(self) -> bool:
        """Every comparison that ran passed (skipped ones are in `partial`)."""
        return all(r.comparison.passed for r in self.ran())

    def ran(self) -> list[Row]:
        return [r for r in self.rows if not r.skipped]

    def failures(self) -> list[Row]:
        return [r for r in self.ran() if not r.comparison.passed]

    def to_json(self) -> dict[str, object]:
        return {
            "unfused": self.unfused, "fused": self.fused, "backend": self.backend,
            "target": self.target, "inputs": self.inputs, "input_shapes": self.input_shapes,
            "status": "PASS" if self.passed else "FAIL",
            "partial": ({"reason": self.partial, **self.partial_detail} if self.partial else None),
            "rows": [r.to_json() for r in self.rows],
        }

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n"


def _num(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.3e}"


def format_table(report: DiffReport) -> str:
    """A fixed-width table, one row per comparison, then the summary lines (format_failures)."""
    head = ("kind", "name", "reference", "dtype", "shape", "max abs err", "MERE", "MARE",
            "T", "NaN/Inf mism.", "status")
    lines = []
    for r in report.rows:
        c = r.comparison
        name = printable(r.name, NAME_WIDTH) + (f" ({r.op_type})" if r.op_type else "")
        if r.skipped:
            lines.append((r.kind, name, r.reference, "-", "-", "-", "-", "-", "-", "-", r.status))
            continue
        lines.append((r.kind, name, r.reference, c.dtype, "[" + ",".join(map(str, c.shape)) + "]",
                      _num(c.max_abs_err), _num(c.mere), _num(c.mare), _num(c.threshold),
                      f"{c.nan_mismatch}/{c.inf_mismatch}", r.status))
    widths = [max(len(h), *(len(row[i]) for row in lines)) if lines else len(h) for i, h in enumerate(head)]
    title = (f"diff {printable(report.unfused, 0)} (unfused) vs {printable(report.fused, 0)} (fused); "
             f"backend {report.backend}, target {report.target}, inputs: {printable(report.inputs, 0)}")
    out = [title,
           "  ".join(h.ljust(w) for h, w in zip(head, widths)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in lines]
    if not report.rows:
        out.append("no graph outputs to compare")
    inside = [r for r in report.rows if r.checked]
    if inside:
        out.append("fused nodes inside If/Loop/Scan bodies:")
        out += [f"  {printable(r.name, NAME_WIDTH)}: {r.checked}" for r in inside]
    return "\n".join(out) + "\n" + format_failures(report)


def row_label(r: Row) -> str:
    """'fused node n (Op)', 'output y' or 'updated input b', model text escaped."""
    if r.kind == "node":
        return f"fused node {printable(r.name)} ({r.op_type})"
    return f"{'updated input' if r.kind == 'update' else 'output'} {printable(r.name)}"


def format_failures(report: DiffReport) -> str:
    """The summary: PASS and the count, or FAIL and one line per failing comparison; then, for a
    partial check, one line saying what could not be checked and why."""
    fails = report.failures()
    ran = len(report.ran())
    skipped = len(report.rows) - ran
    counted = f"{ran} comparisons" + (f" that ran ({skipped} skipped)" if skipped else "")
    if not fails:
        out = [f"PASS: {ran} of {counted}"]
    else:
        out = [f"FAIL: {len(fails)} of {counted}"]
        out += [f"  {row_label(r)}{', ' + r.checked if r.checked else ''}: "
                f"{printable(r.comparison.note, NOTE_WIDTH) or 'over threshold'}" for r in fails]
    left_out = sum(r.comparison.skipped for r in report.rows if not r.skipped)
    if left_out:
        out.append(f"assume-finite: {left_out} position(s) where an input or the reference is +-inf or NaN were "
                   "left out")
    if report.partial:
        out.append(partial_line(report))
    return "\n".join(out) + "\n"


def partial_line(report: DiffReport) -> str:
    return f"partial check: {printable(report.partial, 0)}"
