"""The fixtures of tests/fixtures/subgraphs/ (made by models/make_loop_models.py): their manifest,
inputs drawn as each entry says, and the check of an entry without the pass, which the generator
applies right after export."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "subgraphs"


def entries() -> list[dict]:
    return json.loads((FOLDER / "manifest.json").read_text())


def load(entry: dict) -> onnx.ModelProto:
    return onnx.load(FOLDER / entry["file"])


def feeds(entry: dict, model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    """One value per graph input, drawn as the entry's `inputs` say (matched by name, in any case:
    tf2onnx writes input A as a); `shapes` fixes the dims an exporter left unknown."""
    rng = np.random.default_rng(seed)
    draws = {k.lower(): v for k, v in entry["inputs"].items()}
    fixed = {k.lower(): v for k, v in entry.get("shapes", {}).items()}
    out = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        shape = tuple(fixed.get(vi.name.lower(), [d.dim_value for d in tt.shape.dim]))
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        draw = draws[vi.name.lower()]
        if "value" in draw:
            value = np.full(shape, draw["value"], dtype)
        elif "uniform" in draw:
            value = rng.uniform(*draw["uniform"], size=shape).astype(dtype)
        else:
            value = (rng.standard_normal(shape) * draw["std"]).astype(dtype)
        out[vi.name] = value
    return out


def run_ort(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def check_fixture(entry: dict, seed: int = 0) -> None:
    """The fixture passes the ONNX checker and onnxruntime runs it to finite outputs on the
    entry's inputs (a diverging iteration would make any comparison meaningless)."""
    model = load(entry)
    onnx.checker.check_model(model, full_check=True)
    for value in run_ort(model, feeds(entry, model, seed)):
        assert np.all(np.isfinite(value)), f"{entry['file']}: an output is not finite on the manifest's inputs"
