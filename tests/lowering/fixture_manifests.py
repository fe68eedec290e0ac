"""The committed exporter-made fixtures: tests/fixtures/<exporter>/*.onnx, each folder with a
manifest.json (exporters/: PyTorch, written by models/make_models.py; tf2onnx/: TensorFlow through
tf2onnx, written by models/make_tf_models.py; fp16_converted/: PyTorch fixtures converted to
float16 by onnxconverter-common, written by models/make_converted_models.py; mindspore/: MindSpore's
own backward graphs written with onnx.helper, since its ONNX exporter cannot write them, by
models/make_mindspore_models.py).

The folders in NEW_EXPORTERS (written by models/make_jax_models.py, make_ort_training_models.py and
make_paddle_models.py) hold the exporters the pass is being taught to read by meaning (issue 18):
their manifests have the same format plus ground truth for near misses, and are checked for
soundness by test_new_exporter_fixtures.py; they join MANIFESTS, and so the fusion tests, once
the pass fuses them.

subgraphs/ (models/make_loop_models.py: instances inside If/Loop/Scan bodies) has a manifest of
its own format, read by subgraph_fixtures.py and tested by test_pass_subgraphs.py."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
NEW_EXPORTERS = ("jax", "ort_training", "paddle")
_ALL = [p for p in sorted((REPO / "tests" / "fixtures").glob("*/manifest.json")) if p.parent.name != "subgraphs"]
MANIFESTS = [p for p in _ALL if p.parent.name not in NEW_EXPORTERS]
NEW_EXPORTER_MANIFESTS = [p for p in _ALL if p.parent.name in NEW_EXPORTERS]


# fixtures whose fusion the proof of every match (lowering/proof, docs/proof.md) decides otherwise
# than the manifest its exporter script wrote: file -> (the counts now, why)
PROVED_OTHERWISE: dict[str, tuple[dict[str, int], str]] = {
    "tests/fixtures/exporters/nm_prox_softshrink_ts.onnx": (
        {"ApplyProximalGradientDescent": 1}, "NaN in p gives 0: the op's nan_to_zero variant, exactly"),
    "tests/fixtures/exporters/nm_prox_where_zeros_f32_dynopt.onnx": (
        {"ApplyProximalGradientDescent": 1}, "NaN in p gives 0: the op's nan_to_zero variant, exactly"),
    "tests/fixtures/paddle/nm_prox_softshrink_var_sign.onnx": (
        {"ApplyProximalGradientDescent": 1}, "the Shrink of var - delta alone is the update (nan_to_zero); "
                                             "the sign of var that multiplies it stays outside"),
    "tests/fixtures/tf2onnx/nm_sl1_v1_huber_runtime_weight_f32_op13.onnx": (
        {}, "differs from every variant of the op only at +-inf inputs: fused under assume_finite only"),
    "tests/fixtures/jax/sl1_optax_huber_none_d05_vjp_f16.onnx": (
        {}, "differs from every variant of the op only at +-inf inputs: fused under assume_finite only"),
    "tests/fixtures/exporters/prox_const_group_lasso_f32_dynopt.onnx": (
        {}, "p * relu(1 - t/|p|) is the shrink at t(1 +- 2^-24) per element in float32: 2.4% off one ulp above "
            "t = 0.001, beyond the precision standard (the update over the reals)"),
    "tests/fixtures/exporters/prox_const_group_lasso_f32_ts.onnx": (
        {}, "p * relu(1 - t/|p|) is the shrink at t(1 +- 2^-24) per element in float32: 2.4% off one ulp above "
            "t = 0.001, beyond the precision standard (the update over the reals)"),
    "tests/fixtures/jax/sl1_huber_maximum_mean_d1_f32.onnx": (
        {}, "the graph's |x| - (|x| - 1) loses significance in float32 (1.6% at |x| = 6.4e5): beyond the "
            "precision standard, and a fused op closer to exact is no excuse"),
}


def as_proved(entry: dict) -> dict:
    changed = PROVED_OTHERWISE.get(entry["file"])
    if changed is None:
        return entry
    counts, why = changed
    return {**entry, "expected": {k: counts.get(k, 0) for k in entry["expected"]}, "proved_otherwise": why}


def manifest_entries(proved: bool = True) -> list[dict]:
    """Every fixture's entry, from every manifest in MANIFESTS; "file" is relative to the
    repository; "expected" as the proof decides (PROVED_OTHERWISE), or with `proved=False` as
    the exporter script wrote it."""
    entries = [entry for path in MANIFESTS for entry in json.loads(path.read_text(encoding="utf-8"))]
    return [as_proved(e) for e in entries] if proved else entries


def on_grid(values: np.ndarray, spec: Mapping) -> np.ndarray:
    """Input values rounded to the float dtype an input spec's "grid" names, if any: a
    keep_io_types graph's float32 inputs are drawn as float16 values (models/make_converted_models.py)."""
    grid = spec.get("grid")
    return values if grid is None else values.astype(np.dtype(grid)).astype(np.float64)
