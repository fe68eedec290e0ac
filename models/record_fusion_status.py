"""Record what the pass of this checkout makes of the new exporters' fixtures (tests/fixtures/{jax,
ort_training,paddle}/): each manifest entry gets "fused_today" (the fusion counts by default and
with the patterns only, whether they equal the manifest's ground truth, and the near-match reasons),
and docs/new_exporter_fusion_status.md gets the table of all of them.

The counts are lowering.fuse()'s, which `lower` prints; a fixture is "ok" when the counts equal its
"expected" (zero for a near miss). Rerun after changing the pass.
Usage (from the project's own environment): python models/record_fusion_status.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx

import lowering

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "lowering"))
from fixture_manifests import NEW_EXPORTER_MANIFESTS  # noqa: E402

TABLE = REPO / "docs" / "new_exporter_fusion_status.md"
MAX_REASONS = 3


def status(entry: dict) -> dict:
    model = onnx.load(str(REPO / entry["file"]))
    _, report = lowering.fuse(model)
    _, spelled = lowering.fuse(model, by_meaning=False)
    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    del bare.graph.value_info[:]
    _, untyped = lowering.fuse(bare)
    expected = {k: v for k, v in entry["expected"].items() if v}
    reasons = sorted({r.reason for r in report.rejections})
    return {"counts": report.counts(), "counts_patterns_only": spelled.counts(),
            "counts_without_value_info": untyped.counts(),
            "ok": report.counts() == expected, "ok_patterns_only": spelled.counts() == expected,
            "ok_without_value_info": untyped.counts() == expected,
            "reasons": [r[:300] for r in reasons[:MAX_REASONS]]}


def _cell(counts: dict[str, int]) -> str:
    short = {"SmoothL1LossGradV2": "SL1", "ApplyProximalGradientDescent": "PGD"}
    return " ".join(f"{short[k]}x{v}" for k, v in sorted(counts.items()) if v) or "-"


def main() -> int:
    lines = ["# New exporters' fixtures: what the pass fuses today", "",
             "Written by `models/record_fusion_status.py` (rerun it after changing the pass). "
             "Expected: the manifest's ground truth (a near miss expects nothing). "
             "Fused: `lowering.fuse(model)`; patterns only: `lowering.fuse(model, by_meaning=False)` "
             "(`lower --no-meaning`); no value_info: `lowering.fuse` of the model with its value_info removed.", "",
             "| fixture | expected | fused | patterns only | no value_info | first near-match reason |",
             "| --- | --- | --- | --- | --- | --- |"]
    totals = {"fixtures": 0, "ok": 0, "ok_patterns_only": 0, "ok_without_value_info": 0}
    for path in NEW_EXPORTER_MANIFESTS:
        entries = json.loads(path.read_text(encoding="utf-8"))
        for entry in entries:
            entry["fused_today"] = found = status(entry)
            totals["fixtures"] += 1
            totals["ok"] += found["ok"]
            totals["ok_patterns_only"] += found["ok_patterns_only"]
            totals["ok_without_value_info"] += found["ok_without_value_info"]
            reason = found["reasons"][0].replace("|", "/") if found["reasons"] else ""
            mark = lambda ok: "" if ok else " **(miss)**"  # noqa: E731
            lines.append(f"| {Path(entry['file']).parent.name}/{Path(entry['file']).stem} | {_cell(entry['expected'])} "
                         f"| {_cell(found['counts'])}{mark(found['ok'])} "
                         f"| {_cell(found['counts_patterns_only'])}{mark(found['ok_patterns_only'])} "
                         f"| {_cell(found['counts_without_value_info'])}{mark(found['ok_without_value_info'])} "
                         f"| {reason[:160]} |")
        path.write_text(json.dumps(entries, indent=1) + "\n", encoding="utf-8")
    lines += ["", f"{totals['ok']} of {totals['fixtures']} fixtures as expected, "
                  f"{totals['ok_patterns_only']} with the patterns only, "
                  f"{totals['ok_without_value_info']} without value_info."]
    TABLE.parent.mkdir(exist_ok=True)
    TABLE.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(lines[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
