"""Regenerate the fixtures in tests/fixtures/fp16_converted/ (with their manifest.json): committed
float32 exporter fixtures turned into float16 by onnxconverter-common, the converter deployment
pipelines run after export (`float16.convert_float_to_float16`, default op block list).

The converter computes every op in float16 except those on its block list, among them Max and Min:
it runs those in float32 between Casts, Cast<f16>(Max(Cast<f32>(a), Cast<f32>(b))), which is how a
clamp reaches the pass in a converted model. Every float constant is stored in float16, so the
manifest's constant attributes are the float16 values. The graphs are converted whole
(keep_io_types=False): with float32 inputs and outputs kept, onnxruntime's CPU provider drops the
input Casts to float16 together with the ones it inserts back to float32 (onnxruntime#8787), so its
results come from unrounded inputs and cannot serve as the reference. The pass fuses those graphs
all the same.

Needs onnxconverter-common (1.16), onnx, onnxruntime and pytest; not torch. CI does not have the
converter, so the .onnx files and the manifest are committed.
Usage (in a separate environment: python -m venv occenv && occenv/bin/pip install
onnxconverter-common==1.16.0 onnxruntime pytest): occenv/bin/python models/make_converted_models.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
from fixture_common import load_checker, record, render_form
from onnxconverter_common import float16

REPO = Path(__file__).resolve().parents[1]
SOURCE_MANIFESTS = [REPO / "tests" / "fixtures" / folder / "manifest.json" for folder in ("exporters", "tf2onnx")]
FIXTURES = Path("tests/fixtures/fp16_converted")
MANIFEST = REPO / FIXTURES / "manifest.json"

# float32 fixtures whose converted form exercises Max/Min in float32 between Casts: the clamp of
# the proximal update (against a full-shape zeros initializer, and a 0-D zero), the capped ratio of
# SmoothL1, and a near miss that must stay one (PyTorch); clip_by_value's Max(Min(.)) with its
# float32 bounds left float32 by the converter, in the SmoothL1 clip and the Huber clamp, and
# min(|x|/beta, 1) (tf2onnx). Not the clamp residual p - clip(p, -t, t) of the update with t = 0.001
# in float32: at |p| == t rounded to float16, where `lower diff` and `--verify` place edge inputs, onnxruntime
# subtracts the float32 t (onnxruntime#8787 again), so its reference is off there; the pass's
# reading of that clamp is tested on hand-built graphs (tests/lowering/test_pass_converted_fp16.py).
SOURCES = [
    "tests/fixtures/exporters/prox_const_maximum_f32_dynopt.onnx",
    "tests/fixtures/exporters/prox_const_maximum_f32_ts.onnx",
    "tests/fixtures/exporters/prox_tensor_clamp_f32_dynopt.onnx",
    "tests/fixtures/exporters/sl1_hand_sign_min_sum_b05_f32_dynopt.onnx",
    "tests/fixtures/exporters/sl1_hand_sign_min_sum_b05_f32_ts.onnx",
    "tests/fixtures/exporters/nm_prox_tensor_clamp_residual_f32_dynopt.onnx",
    "tests/fixtures/tf2onnx/sl1_hand_clip_none_b05_f32_op13.onnx",
    "tests/fixtures/tf2onnx/sl1_hand_huber_clamp_sum_d2_f32_op13.onnx",
    "tests/fixtures/tf2onnx/sl1_hand_sign_min_sum_b05_f32_op13.onnx",
]
DTYPE_NAMES = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.FLOAT16: "float16"}


def _half_value(value: object) -> object:
    """A float constant as the converted graph stores it."""
    return float(np.float16(value)) if isinstance(value, float) else value


def _instance(inst: dict) -> dict:
    """A source manifest instance with the float16 constants of the converted graph, so the float64
    reference reads exactly what the float16 computation reads."""
    out = {k: _half_value(v) for k, v in inst.items() if k != "inputs"}
    out["inputs"] = {k: _half_value(v) for k, v in inst["inputs"].items()}
    return out


def _entry(source: dict, file: str, model: onnx.ModelProto) -> dict:
    io_types = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    entry = {
        "file": file,
        "exporter": f"{source['exporter']} + onnxconverter-common float16",
        "opset": source["opset"],
        "family": source["family"],
        "expected": source["expected"],
        "attrs": [_instance(i) for i in source["attrs"]],
        "dtype": "float16",
        "dynamic": source["dynamic"],
        "inputs": {name: {**spec, "dtype": DTYPE_NAMES[io_types[name]]} for name, spec in source["inputs"].items()},
        "notes": f"{Path(source['file']).name} converted to float16: Max/Min run in float32 between Casts. "
                 + source["notes"],
        "form": render_form(model),
        "size_bytes": (REPO / file).stat().st_size,
    }
    if "not_fused" in source:
        entry["not_fused"] = [_instance(i) for i in source["not_fused"]]
    return entry


def main() -> int:
    sources = {e["file"]: e for path in SOURCE_MANIFESTS for e in json.loads(path.read_text(encoding="utf-8"))}
    check_entry = load_checker()
    entries = []
    for path in SOURCES:
        source = sources[path]
        converted = float16.convert_float_to_float16(onnx.load(REPO / path), keep_io_types=False)
        file = str(FIXTURES / f"{Path(path).stem.replace('_f32', '')}_fp16conv.onnx")
        entry, worst = record(file, converted, lambda m, s=source, f=file: _entry(s, f, m), check_entry, {}, show=False)
        entries.append(entry)
        print(f"{file}: worst MARE {worst:.3g}")
    MANIFEST.write_text(json.dumps(entries, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
