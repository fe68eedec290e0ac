"""Every kernel of every sample model (models/*.onnx) compiles, runs and matches on the twin.

For each model and target: `lower diff` semantics with the twin backend (fused model against
onnxruntime on the unfused one, per output and per fused node) must pass, and every fused
node's output must be bit-identical to the CPU backend's, also with inf/NaN among the inputs.
The CLI entry points take --backend twin.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from twin_cases import differing

from app.cli import main
from codegen.targets import TARGETS
from lowering import fuse
from lowering.loading import load
from runtime.diff import diff_models
from runtime.graph_exec import run_fused_model
from runtime.inputs import (
    edge_hints,
    generate_inputs,
    model_input_specs,
    resolve_shapes,
)
from runtime.report import DiffReport

MODELS = sorted((Path(__file__).resolve().parents[2] / "models").glob("*.onnx"))


def _feeds(unfused, fused, seed: int, nonfinite: bool):
    specs = model_input_specs(unfused)
    return generate_inputs(specs, resolve_shapes(specs, {}), seed, nonfinite, edge_hints(fused))


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("path", MODELS, ids=[p.stem for p in MODELS])
def test_model_kernels_match_onnxruntime_and_cpu_backend(path, target, twin, cpu, seed):
    unfused = load(str(path)).model
    fused, report = fuse(unfused)
    assert report.fusions, f"{path.name} has no fused node"
    feeds = _feeds(unfused, fused, seed, nonfinite=False)
    diff = DiffReport(path.name, "fused", twin.name, target, f"seed {seed}")
    diff_models(unfused, fused, feeds, twin, target, diff)
    assert diff.passed, f"seed {seed}: {[r.to_json() for r in diff.failures()]}"
    for nonfinite in (False, True):
        feeds = _feeds(unfused, fused, seed, nonfinite)
        _, twin_runs = run_fused_model(fused, feeds, twin, target)
        _, cpu_runs = run_fused_model(fused, feeds, cpu, target)
        for t, c in zip(twin_runs, cpu_runs):
            assert t.error == "", t.error
            for role, value in t.outputs.items():
                bad = differing(value, c.outputs[role])
                assert bad.size == 0, \
                    f"seed {seed}, node {t.node.name}: {bad.size} elements differ from the CPU backend"


def test_lower_verify_and_lower_diff_take_the_twin_backend(twin, tmp_path, capsys):
    model = next(p for p in MODELS if p.stem == "box_head_train_step")
    out = tmp_path / "lowered"
    report = tmp_path / "verify.json"
    assert main([str(model), "--target", "ascend910b", "-o", str(out), "--verify", "--backend", "twin", "-q",
                 "--json", str(report)]) == 0
    assert capsys.readouterr() == ("", "")  # -q: nothing on success, --verify included
    verify = json.loads(report.read_text())
    assert verify["backend"] == "twin" and verify["status"] == "PASS"
    fused = out / f"{model.stem}.fused.onnx"
    assert main(["diff", str(model), str(fused), "--backend", "twin", "--target", "ascend950", "--edge-nonfinite"]) == 0
    assert "backend twin, target ascend950" in capsys.readouterr().out
