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
    kind: str  # "output" (a graph output) or "node" (a fused node's kernel)
    name: str  # output or node name: text from the model, shown escaped
    reference: str  # what the golden was: "unfused graph", "matched subgraph", "float64 formula"
    comparison: Comparison
    op_type: str = ""
    checked: str = ""  # a fused node inside a body: what its row compares ("checked in 100 iterations of ...")

    def to_json(self) -> dict[str, object]:
        d = self.comparison.to_json()
        d.update(kind=self.kind, name=self.name, op_type=self.op_type, reference=self.reference)
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

    @property
    def passed(self) -> bool:
        return all(r.comparison.passed for r in self.rows)

    def failures(self) -> list[Row]:
        return [r for r in self.rows if not r.comparison.passed]

    def to_json(self) -> dict[str, object]:
        return {
            "unfused": self.unfused, "fused": self.fused, "backend": self.backend,
            "target": self.target, "inputs": self.inputs, "input_shapes": self.input_shapes,
            "status": "PASS" if self.passed else "FAIL",
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
        lines.append((r.kind, name, r.reference, c.dtype, "[" + ",".join(map(str, c.shape)) + "]",
                      _num(c.max_abs_err), _num(c.mere), _num(c.mare), _num(c.threshold),
                      f"{c.nan_mismatch}/{c.inf_mismatch}", "PASS" if c.passed else "FAIL"))
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


def format_failures(report: DiffReport) -> str:
    """The summary: PASS and the count, or FAIL and one line per failing comparison."""
    fails = report.failures()
    if not fails:
        return f"PASS: {len(report.rows)} of {len(report.rows)} comparisons\n"
    out = [f"FAIL: {len(fails)} of {len(report.rows)} comparisons"]
    for r in fails:
        what = (f"fused node {printable(r.name)} ({r.op_type})" if r.kind == "node"
                else f"output {printable(r.name)}")
        if r.checked:
            what += f", {r.checked}"
        out.append(f"  {what}: {printable(r.comparison.note, NOTE_WIDTH) or 'over threshold'}")
    return "\n".join(out) + "\n"
