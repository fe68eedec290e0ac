"""The exporter-made fixtures in tests/fixtures/*/ are valid and mean what their manifests say.

Every manifest entry must load, pass onnx.checker, run under onnxruntime with graph optimizations
disabled, and, for every fused-node instance listed in its "attrs", the graph value named there
must match the float64 reference of contracts/fused_ops.py fed with the values bound in "inputs"
(graph inputs, intermediates fetched from onnxruntime, or constants written as numbers), within the
CANN precision standard (runtime/precision.py).

models/make_models.py and models/make_tf_models.py import check_entry() from this file, so the
generators and the test suite apply one and the same check.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from fixture_manifests import MANIFESTS, manifest_entries, on_grid

from contracts import fused_ops

REPO = Path(__file__).resolve().parents[2]

_NP_DTYPES: dict[str, type] = {
    "float32": np.float32,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "int64": np.int64,
}
_ONNX_DTYPES = {
    "float32": onnx.TensorProto.FLOAT,
    "float16": onnx.TensorProto.FLOAT16,
    "bfloat16": onnx.TensorProto.BFLOAT16,
    "int64": onnx.TensorProto.INT64,
}
# the CANN precision standard (runtime/precision.py): T per output dtype; pass when MERE < T and MARE < 10 T.
THRESHOLDS = {"float32": 2.0**-13, "float16": 2.0**-10, "bfloat16": 2.0**-7}


def entry_seed(entry: Mapping) -> int:
    """A fixed per-fixture seed, so a failure names data that can be reproduced."""
    return zlib.crc32(entry["file"].encode())


def make_feeds(entry: Mapping, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random inputs of the manifest's concrete shapes; "range" asks for uniform values, "grid"
    for values another dtype holds exactly (a keep_io_types graph's float32 inputs)."""
    feeds = {}
    for name, spec in entry["inputs"].items():
        shape = tuple(spec["shape"])
        if "range" in spec:
            lo, hi = spec["range"]
            values = rng.uniform(lo, hi, size=shape)
        else:
            values = rng.standard_normal(shape) * spec.get("scale", 1.0)
        feeds[name] = on_grid(np.asarray(values), spec).astype(_NP_DTYPES[spec["dtype"]])
    _place_edges(entry, feeds)
    return feeds


def _place_edges(entry: Mapping, feeds: dict[str, np.ndarray]) -> None:
    """Put exact-threshold and zero cases into inputs that feed a fused instance directly."""
    for inst in entry["attrs"]:
        bound = inst["inputs"]
        if inst["op"] == fused_ops.SMOOTH_L1_GRAD:
            p, t = bound["predict"], bound["label"]
            if isinstance(p, str) and isinstance(t, str) and p in feeds and t in feeds:
                sigma = inst["sigma"]
                label = np.array([0.25, -0.5, 1.0, 0.0, -1.25])
                diff = np.array([0.0, sigma, -sigma, 0.0, sigma])
                k = min(label.size, feeds[p].size)
                feeds[t].reshape(-1)[:k] = label[:k].astype(feeds[t].dtype)
                feeds[p].reshape(-1)[:k] = (label + diff)[:k].astype(feeds[p].dtype)
        elif inst["op"] == fused_ops.PROXIMAL_GD:
            v, d = bound["var"], bound["delta"]
            if isinstance(v, str) and isinstance(d, str) and v in feeds and d in feeds:
                k = min(2, feeds[v].size)
                feeds[v].reshape(-1)[:k] = np.array([0.0, -0.0])[:k].astype(feeds[v].dtype)
                feeds[d].reshape(-1)[:k] = 0


def _to_ort(value: np.ndarray, dtype_name: str) -> ort.OrtValue:
    if dtype_name == "bfloat16":
        # onnxruntime's numpy bridge has no bfloat16: hand it the raw bits.
        bits = np.ascontiguousarray(value).view(np.uint16)
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, onnx.TensorProto.BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(value))


def _value_types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {}
    for vi in (*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input):
        types[vi.name] = vi.type.tensor_type.elem_type
    for init in inferred.graph.initializer:
        types[init.name] = init.data_type
    return types


def run_fixture(
    model: onnx.ModelProto, entry: Mapping, feeds: Mapping[str, np.ndarray], fetch: list[str]
) -> dict[str, np.ndarray]:
    """Run with ORT_DISABLE_ALL and return the named values (intermediates too) as numpy.

    Intermediates become extra graph outputs; a bfloat16 value is read through an exact Cast to
    float32 (then rounded back), because onnxruntime cannot return bfloat16 as numpy.
    """
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    types = _value_types(model)
    graph_outputs = {o.name for o in probe.graph.output}
    read_as: dict[str, str] = {}
    for name in fetch:
        if name not in types:
            raise KeyError(f"{entry['file']}: no value named {name!r} in the graph")
        elem = types[name]
        if elem == onnx.TensorProto.BFLOAT16:
            alias = f"{name}__as_f32"
            probe.graph.node.append(
                onnx.helper.make_node("Cast", [name], [alias], to=onnx.TensorProto.FLOAT)
            )
            probe.graph.output.append(
                onnx.helper.make_tensor_value_info(alias, onnx.TensorProto.FLOAT, None)
            )
            read_as[name] = alias
        else:
            if name not in graph_outputs:
                probe.graph.output.append(onnx.helper.make_tensor_value_info(name, elem, None))
            read_as[name] = name
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(
        probe.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    ort_feeds = {n: _to_ort(v, entry["inputs"][n]["dtype"]) for n, v in feeds.items()}
    names = [read_as[n] for n in fetch]
    values = session.run_with_ort_values(names, ort_feeds)
    out = {}
    for name, value in zip(fetch, values):
        array = value.numpy()
        if types[name] == onnx.TensorProto.BFLOAT16:
            array = array.astype(ml_dtypes.bfloat16)
        out[name] = array
    return out


def precision(actual: np.ndarray, golden: np.ndarray) -> tuple[float, float, bool]:
    """(MERE, MARE, NaN positions agree) of actual against the float64 golden."""
    a = np.asarray(actual, np.float64).reshape(-1)
    g = np.broadcast_to(np.asarray(golden, np.float64), np.shape(actual)).reshape(-1)
    nan_a, nan_g = np.isnan(a), np.isnan(g)
    ok = ~(nan_a | nan_g)
    with np.errstate(invalid="ignore", over="ignore"):
        rel = np.abs(a[ok] - g[ok]) / (np.abs(g[ok]) + 1e-7)
    if rel.size == 0:
        return 0.0, 0.0, bool(np.array_equal(nan_a, nan_g))
    return float(rel.mean()), float(rel.max()), bool(np.array_equal(nan_a, nan_g))


def _dtype_name(array: np.ndarray) -> str:
    if array.dtype == ml_dtypes.bfloat16:
        return "bfloat16"
    return str(array.dtype)


def _reference(inst: Mapping, values: Mapping[str, np.ndarray]) -> np.ndarray:
    def bound(key: str) -> np.ndarray:
        ref = inst["inputs"][key]
        return np.asarray(values[ref] if isinstance(ref, str) else ref, np.float64)

    if inst["op"] == fused_ops.SMOOTH_L1_GRAD:
        return fused_ops.smooth_l1_grad_reference(
            bound("predict"),
            bound("label"),
            bound("dout"),
            inst["sigma"],
            inst["reduction"],
            inst.get("scale", 1.0),
        )
    if inst["op"] == fused_ops.PROXIMAL_GD:
        return fused_ops.proximal_gd_reference(
            bound("var"),
            bound("alpha"),
            bound("l1"),
            bound("l2"),
            bound("delta"),
            inst["scalar_form"],
        )
    raise ValueError(f"unknown fused op {inst['op']!r}")


def check_entry(entry: Mapping, root: Path = REPO, seed: int | None = None) -> list[dict]:
    """Check one manifest entry; returns one metrics row per fused instance, raises on failure."""
    path = root / entry["file"]
    model = onnx.load(path)
    onnx.checker.check_model(model)
    opset = {o.domain: o.version for o in model.opset_import}[""]
    if opset != entry["opset"]:
        raise AssertionError(f"{entry['file']}: opset {opset}, manifest says {entry['opset']}")
    expected_instances = sum(entry["expected"].values())
    if len(entry["attrs"]) != expected_instances:
        raise AssertionError(f"{entry['file']}: {len(entry['attrs'])} attrs, expected counts say {expected_instances}")
    feeds = make_feeds(entry, np.random.default_rng(entry_seed(entry) if seed is None else seed))
    fetch = [o.name for o in model.graph.output]
    for inst in (*entry["attrs"], *entry.get("not_fused", [])):
        for ref in (*inst["inputs"].values(), inst["output"]):
            if isinstance(ref, str) and ref not in feeds and ref not in fetch:
                fetch.append(ref)
    values = {**feeds, **run_fixture(model, entry, feeds, fetch)}
    rows = []
    for inst in (*entry["attrs"], *entry.get("not_fused", [])):
        actual = values[inst["output"]]
        golden = _reference(inst, values)
        dtype = _dtype_name(actual)
        mere, mare, nan_ok = precision(actual, golden)
        limit = THRESHOLDS[dtype]
        row = {"file": entry["file"], "op": inst["op"], "output": inst["output"], "dtype": dtype,
               "mere": mere, "mare": mare}
        if not (nan_ok and mere < limit and mare < 10 * limit):
            raise AssertionError(
                f"{entry['file']}: {inst['op']} -> {inst['output']} ({dtype}) differs from the "
                f"float64 reference: MERE {mere:.3g} (limit {limit:.3g}), MARE {mare:.3g} "
                f"(limit {10 * limit:.3g}), NaN positions agree: {nan_ok}"
            )
        rows.append(row)
    return rows


_ENTRIES = manifest_entries(proved=False)  # the manifests as their scripts wrote them


def test_manifest_covers_every_fixture_file() -> None:
    listed = {e["file"] for e in _ENTRIES}
    on_disk = {str(p.relative_to(REPO)) for m in MANIFESTS for p in m.parent.glob("*.onnx")}
    assert on_disk and len(MANIFESTS) >= 2, "fixtures missing"
    assert on_disk <= listed, f"fixtures missing from the manifest: {sorted(on_disk - listed)}"
    missing = sorted(f for f in listed if not (REPO / f).exists())
    assert not missing, f"manifest entries without a file: {missing}"
    assert len(listed) == len(_ENTRIES), "duplicate manifest entries"


def test_manifest_entries_are_well_formed() -> None:
    families = {"smooth_l1_grad", "proximal_gd", "mixed", "near_miss"}
    for e in _ENTRIES:
        assert e["family"] in families, e["file"]
        assert set(e["expected"]) == {fused_ops.SMOOTH_L1_GRAD, fused_ops.PROXIMAL_GD}, e["file"]
        if e["family"] == "near_miss":
            assert not any(e["expected"].values()), e["file"]
        for inst in e["attrs"]:
            spec = fused_ops.OP_SPECS[inst["op"]]
            assert set(inst["inputs"]) == set(spec.inputs), e["file"]
            assert set(inst) - {"op", "inputs", "output"} <= set(spec.attrs), e["file"]
        for op, count in e["expected"].items():
            assert count == sum(1 for i in e["attrs"] if i["op"] == op), e["file"]
        # The manifest describes the bytes it was generated with; a file regenerated alone drifts.
        assert (REPO / e["file"]).stat().st_size == e["size_bytes"], f"{e['file']}: manifest out of date"


@pytest.mark.parametrize("entry", _ENTRIES, ids=[Path(e["file"]).stem for e in _ENTRIES])
def test_fixture_runs_and_matches_reference(entry: dict) -> None:
    rows = check_entry(entry)
    assert len(rows) == len(entry["attrs"]) + len(entry.get("not_fused", []))
