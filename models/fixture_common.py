"""What the fixture generators (make_models.py for PyTorch, make_tf_models.py for tf2onnx,
make_converted_models.py for onnxconverter-common, make_jax_models.py, make_ort_training_models.py
and make_paddle_models.py for the exporters of tests/lowering/new_exporter_check.py) share,
needing neither torch nor TensorFlow: the test suite's check of one manifest entry (they apply the
very check the tests apply), and the manifest's text forms of a graph."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx

REPO = Path(__file__).resolve().parents[1]


def _load_test_module(file: str) -> ModuleType:
    """A module of tests/lowering/ loaded from its file (tests/ is no package), with the folders
    it imports from on the path."""
    for folder in (REPO, REPO / "tests" / "lowering"):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(f"fixtures_{Path(file).stem}",
                                                  REPO / "tests" / "lowering" / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_checker() -> Callable[..., list[dict]]:
    """check_entry(entry, repo) of tests/lowering/test_fixtures_load.py."""
    return _load_test_module("test_fixtures_load.py").check_entry


def load_new_exporter_checker() -> ModuleType:
    """tests/lowering/new_exporter_check.py, whose check_new_entry() and nonfinite_outputs() the
    generators of the new exporters' fixtures apply right after export."""
    return _load_test_module("new_exporter_check.py")


def record(file: str, model: onnx.ModelProto, make_entry: Callable[[onnx.ModelProto], dict],
           check_entry: Callable[..., list[dict]], limits: dict[str, list[str]], show: bool) -> tuple[dict, float]:
    """Writes one fixture, makes its manifest entry (after the write: the entry records the file's
    size), adds the exporter limits measured for it to the entry's notes and checks the entry.
    Returns the entry and its worst MARE against the float64 reference."""
    out = REPO / file
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, out)
    entry = make_entry(model)
    if file in limits:
        entry["notes"] = " ".join([entry["notes"], *limits.pop(file)])
    if show:
        print(f"\n## {file} [{entry['exporter']}]\n{entry['form']}")
    metrics = check_entry(entry, REPO)
    return entry, max((m["mare"] for m in metrics), default=0.0)


def _const_text(array: np.ndarray, kind: str) -> str:
    """A constant as the forms print it: the value if one element, else the values or the shape."""
    if array.size == 1 and array.ndim <= 1:
        value = array.reshape(-1)[0]
        text = f"{float(value):.6g}" if array.dtype.kind == "f" else str(value)
        return f"{kind}:{text}" + ("" if array.ndim == 0 else "[1]")
    if array.size <= 4:
        return f"{kind}:{array.tolist()}"
    zero = " zeros" if not np.any(array) else ""
    return f"{kind}:{array.dtype}{list(array.shape)}{zero}"


def render_form(model: onnx.ModelProto) -> str:
    """The graph as nested expressions; values used more than once are named once (name=expr;)."""
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    uses = Counter(i for n in graph.node for i in n.input if i)
    uses.update(o.name for o in graph.output)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}
    inputs = {i.name for i in graph.input}
    bindings: list[str] = []
    named: set[str] = set()

    def attr_text(node: onnx.NodeProto) -> str:
        parts = []
        for a in node.attribute:
            if node.op_type == "Constant":
                continue
            value = onnx.helper.get_attribute_value(a)
            if isinstance(value, onnx.TensorProto):
                value = _const_text(onnx.numpy_helper.to_array(value), "tensor")
            if a.name == "to":
                value = onnx.TensorProto.DataType.Name(value)
            parts.append(f"{a.name}={value}")
        return ("," + ",".join(parts)) if parts else ""

    def text(value: str, top: bool = False) -> str:
        if not value:
            return "''"
        if value in inputs:
            return f"init-input:{value}" if value in inits else value
        if value in inits:
            return _const_text(inits[value], "init")
        node = producer[value]
        if node.op_type == "Constant":
            return _const_text(onnx.numpy_helper.to_array(node.attribute[0].t), "const") \
                if node.attribute[0].name == "value" else f"const:{onnx.helper.get_attribute_value(node.attribute[0])}"
        if uses[value] > 1 and not top:
            if value not in named:
                named.add(value)
                bindings.append(f"{value}={text(value, top=True)}")
            return value
        args = ",".join(text(i) for i in node.input)
        return f"{node.op_type}({args}{attr_text(node)})"

    outs = [f"{o.name}<-{text(o.name, top=True)}" for o in graph.output]
    return "; ".join(bindings + outs)


def ops_histogram(model: onnx.ModelProto) -> str:
    counts = Counter(n.op_type for n in model.graph.node)
    return " ".join(f"{op}{'x' + str(k) if k > 1 else ''}" for op, k in sorted(counts.items()))


def record_new_exporter_fixture(file: str, model: onnx.ModelProto, entry: dict, checker: ModuleType) -> dict:
    """Writes one fixture of a new exporter and completes its manifest entry (form, size, what NaN and
    inf inputs give and, for each near miss, where it differs from the function it resembles), then
    checks the entry as tests/lowering/test_new_exporter_fixtures.py does."""
    out = REPO / file
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, out)
    entry = {"file": file, **entry, "form": render_form(model), "size_bytes": out.stat().st_size}
    entry["nonfinite_outputs"] = checker.nonfinite_outputs(entry, model)
    rows = checker.check_new_entry(entry, REPO)
    for miss, row in zip(entry.get("near_misses", []), rows[len(entry["attrs"]):]):
        miss["differs_at"] = row["differs_at"]
    return entry


def remove_stale_fixtures(folder: Path, kept: set[str]) -> list[str]:
    """Deletes the .onnx files of `folder` (relative to the repository) that a full regeneration did
    not write, so a renamed or dropped case leaves no file behind; returns their names."""
    stale = sorted(p for p in (REPO / folder).glob("*.onnx") if str(p.relative_to(REPO)) not in kept)
    for path in stale:
        path.unlink()
    return [p.name for p in stale]


def keep_fusion_status(entry: dict, old: dict | None) -> None:
    """Carry the "fused_today" that models/record_fusion_status.py recorded over a regeneration."""
    if old is not None and "fused_today" in old:
        entry["fused_today"] = old["fused_today"]


def write_new_exporter_manifest(manifest: Path, fixtures: Path, entries: list[dict],
                                rows: list[tuple[str, int, str]], prune: bool) -> None:
    """Write a new exporter's manifest; on a full run (`prune`) remove fixture files no case writes
    any more; print one line per model written."""
    manifest.write_text(json.dumps(entries, indent=1) + "\n", encoding="utf-8")
    if prune:
        for name in remove_stale_fixtures(fixtures, {e["file"] for e in entries}):
            print(f"removed {name}: no case writes it")
    width = max((len(r[0]) for r in rows), default=0)
    for name, size, hist in rows:
        print(f"{name:<{width}}  {size:>6}  {hist}")
    print(f"{len(rows)} models written to {fixtures} and checked")
