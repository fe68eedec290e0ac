"""The fixtures from exporters the pass is being taught (tests/fixtures/{jax,ort_training,paddle}/)
are sound, whatever the pass makes of them: every manifest entry passes new_exporter_check's
check (loads, ONNX checker, onnxruntime on seeded inputs with edge values, float64 ground truth
within the CANN standard, near misses that really differ), and the check has teeth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixture_manifests import NEW_EXPORTER_MANIFESTS
from new_exporter_check import REPO, SMOOTH_L1_GRAD, check_new_entry

_ENTRIES = [e for path in NEW_EXPORTER_MANIFESTS for e in json.loads(path.read_text(encoding="utf-8"))]


def test_every_new_exporter_fixture_is_listed_once() -> None:
    listed = [e["file"] for e in _ENTRIES]
    on_disk = {str(p.relative_to(REPO)) for m in NEW_EXPORTER_MANIFESTS for p in m.parent.glob("*.onnx")}
    assert on_disk, "no fixtures"
    assert len(listed) == len(set(listed)), "duplicate manifest entries"
    assert on_disk == set(listed), f"on disk, not listed: {sorted(on_disk - set(listed))}; " \
                                   f"listed, not on disk: {sorted(set(listed) - on_disk)}"
    for e in _ENTRIES:
        # the manifest describes the bytes it was generated with; a file regenerated alone drifts
        assert (REPO / e["file"]).stat().st_size == e["size_bytes"], f"{e['file']}: manifest out of date"
        assert e["exporter"] and e["exporter_version"] and e["source"], e["file"]


@pytest.mark.parametrize("entry", _ENTRIES, ids=[Path(e["file"]).stem for e in _ENTRIES])
def test_fixture_computes_its_ground_truth(entry: dict) -> None:
    rows = check_new_entry(entry)
    assert len(rows) == len(entry["attrs"]) + len(entry.get("near_misses", []))


def _perturbed(entry: dict) -> list[tuple[str, dict]]:
    """Copies of the entry whose ground truth is off by a little: each must fail the check."""
    out = []
    for k, inst in enumerate(entry["attrs"]):
        keys = ["sigma", "scale"] if inst["op"] == SMOOTH_L1_GRAD else []
        keys += [key for key in ("alpha", "l1", "l2") if isinstance(inst["inputs"].get(key), float)]
        for key in keys:
            bad = json.loads(json.dumps(entry))
            target = bad["attrs"][k] if key in inst else bad["attrs"][k]["inputs"]
            if target[key] == 0:
                continue
            target[key] *= 1.1
            out.append((f"{inst['output']}.{key}", bad))
    return out


_PERTURBED = [(f"{Path(e['file']).stem}:{what}", bad) for e in _ENTRIES for what, bad in _perturbed(e)]


@pytest.mark.parametrize("bad", [b for _, b in _PERTURBED], ids=[i for i, _ in _PERTURBED])
def test_check_refuses_a_ground_truth_off_by_ten_percent(bad: dict) -> None:
    with pytest.raises(AssertionError, match="is not"):
        check_new_entry(bad)
