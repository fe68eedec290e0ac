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
# PyTorch's SmoothL1 backward (aten's decomposition, and autograd of F.smooth_l1_loss) converted both
# whole and with keep_io_types=True, the converter's two deployment modes: the select form with no
# Max/Min, whose constants (0.5, 1/numel) and the Casts at the float32 inputs and output are what
# conversion changes
KEPT_IO_SOURCES = [
    "tests/fixtures/exporters/sl1_aten_mean_b05_f32_dynopt.onnx",
    "tests/fixtures/exporters/sl1_autograd_mean_b05_f32_dynopt.onnx",
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


def _in_float16(inst: dict, model: onnx.ModelProto) -> dict:
    """An instance of a keep_io_types graph bound to the float16 values it computes on: each
    float32 graph input through the Cast to float16 the converter put after it, the output before
    the Cast back to float32, so the reference and the precision standard are float16's, as the
    fused node's are."""
    graph_inputs = {i.name for i in model.graph.input}
    graph_outputs = {o.name for o in model.graph.output}
    casts = [n for n in model.graph.node if n.op_type == "Cast"]
    narrowed = {n.input[0]: n.output[0] for n in casts if n.input[0] in graph_inputs}
    widened = {n.output[0]: n.input[0] for n in casts if n.output[0] in graph_outputs}
    inputs = {k: narrowed.get(v, v) if isinstance(v, str) else v for k, v in inst["inputs"].items()}
    return {**inst, "inputs": inputs, "output": widened.get(inst["output"], inst["output"])}


def _input_spec(spec: dict, elem_type: int, kept_io: bool) -> dict:
    """A source input's spec in the converted graph. A float32 input of a keep_io_types graph is
    drawn on float16's grid ("grid"): the graph rounds it to float16 first, and onnxruntime's CPU
    provider drops that Cast together with the one it inserts back (onnxruntime#8787), so only
    inputs the rounding leaves as they are give the float16 computation as the reference."""
    out = {**spec, "dtype": DTYPE_NAMES[elem_type]}
    if kept_io and elem_type == onnx.TensorProto.FLOAT:
        out["grid"] = "float16"
    return out


def _entry(source: dict, file: str, model: onnx.ModelProto) -> dict:
    io_types = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    kept_io = any(t == onnx.TensorProto.FLOAT for t in io_types.values())
    attrs = [_instance(i) for i in source["attrs"]]
    entry = {
        "file": file,
        "exporter": f"{source['exporter']} + onnxconverter-common float16",
        "opset": source["opset"],
        "family": source["family"],
        "expected": source["expected"],
        "attrs": [_in_float16(i, model) for i in attrs] if kept_io else attrs,
        "dtype": "float16",
        "dynamic": source["dynamic"],
        "inputs": {name: _input_spec(spec, io_types[name], kept_io) for name, spec in source["inputs"].items()},
        "notes": f"{Path(source['file']).name} converted to float16"
                 + (" with keep_io_types=True: float32 inputs and output, each Cast to or from float16 at the "
                    "graph's edge; the instance is bound to the float16 values inside. " if kept_io else
                    ": Max/Min run in float32 between Casts. ") + source["notes"],
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
    runs = [(path, False) for path in SOURCES + KEPT_IO_SOURCES] + [(path, True) for path in KEPT_IO_SOURCES]
    for path, keep_io_types in runs:
        source = sources[path]
        converted = float16.convert_float_to_float16(onnx.load(REPO / path), keep_io_types=keep_io_types)
        suffix = "_fp16conv_keepio" if keep_io_types else "_fp16conv"
        file = str(FIXTURES / f"{Path(path).stem.replace('_f32', '')}{suffix}.onnx")
        entry, worst = record(file, converted, lambda m, s=source, f=file: _entry(s, f, m), check_entry, {}, show=False)
        entries.append(entry)
        print(f"{file}: worst MARE {worst:.3g}")
    MANIFEST.write_text(json.dumps(entries, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
