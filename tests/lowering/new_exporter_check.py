"""The soundness check of the fixtures from exporters the pass is being taught (JAX through jax2onnx,
onnxruntime-training's gradient builder, PaddlePaddle through paddle2onnx), whatever the pass makes
of them; test_new_exporter_fixtures.py applies it to every manifest entry.

Each manifest entry in tests/fixtures/{jax,ort_training,paddle}/manifest.json must load, pass the
ONNX checker, run under onnxruntime (graph optimizations off) on seeded random inputs with the
edge values placed in them (x = 0, -0, +-sigma exactly, var = +-0), and every output it lists
must equal a float64 numpy reference of its ground truth within the CANN precision standard
(runtime/precision.py):

- "attrs": the fused-op instances the graph holds (SmoothL1LossGradV2: sigma, reduction, scale;
  ApplyProximalGradientDescent: alpha, l1, l2 and their scalar form), checked against the formulas
  below, written here again rather than taken from lowering/, so a change there cannot move them;
- "near_misses": outputs that look like one of those functions but compute something else; each
  names the formula it computes (checked like an instance) and the instance it resembles, which
  must differ from it on the probe inputs (the first such input is recorded in "differs_at"),
  unless it is a near miss by rule, not by value ("same_values_but" says which rule: plain SGD is
  the update with l1 = l2 = 0, which DESIGN section 2 keeps unfused);
- "nonfinite_outputs": for a NaN and a +inf in predict (var), where that is a graph input, the class
  of the output element there ("nan", "+inf", "-inf", "finite") in the graph and in the contract of
  the instance (resembled), as measured at generation time: an autodiff graph may disagree.

A checked output may be an intermediate (onnxruntime-training's gradient feeds an in-place
accumulator and is no graph output). The training graphs' two training-only ops, which CI's
onnxruntime lacks, run as the ONNX ops that define them (_training_op_definitions).

Nothing here needs the exporters (CI has none): the models/make_*_models.py scripts that write the
fixtures load this module to apply the same check right after export, and to measure what they
record (differs_at, nonfinite_outputs).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort

from runtime.precision import compare

REPO = Path(__file__).resolve().parents[2]
SMOOTH_L1_GRAD = "SmoothL1LossGradV2"
PROXIMAL_GD = "ApplyProximalGradientDescent"
MAX_FIXTURE_BYTES = 100_000
NP_DTYPES: dict[str, type] = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
                              "bool": np.bool_}


# ----------------------------------------------------------------------------------------------
# Float64 references: the two functions' contracts and the near-miss formulas.

def _sign(x: np.ndarray) -> np.ndarray:
    """sign with sign(+-0) = 0 and NaN kept."""
    return np.where(np.isnan(x), x, np.sign(x))


def _norm(predict: np.ndarray, reduction: str) -> float:
    return 1.0 / predict.size if reduction == "mean" and predict.size else 1.0


def smooth_l1_grad(predict: np.ndarray, label: np.ndarray, dout: np.ndarray, sigma: float,
                   reduction: str, scale: float = 1.0) -> np.ndarray:
    """d/dpredict of the SmoothL1 loss: scale * norm * dout * (x/sigma if |x| < sigma else sign(x))."""
    x = predict - label
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(np.abs(x) < sigma, x / (sigma or 1.0), _sign(x))
    return scale * _norm(predict, reduction) * dout * s


def proximal_gd(var: np.ndarray, alpha: np.ndarray, l1: np.ndarray, l2: np.ndarray, delta: np.ndarray,
                scalar_form: str) -> np.ndarray:
    """sign(p) * max(|p| - threshold, 0) / divisor with p = var - alpha * delta; the scalar form says
    whether l1, l2 are the raw strengths, the folded threshold and divisor, or threshold and 1/divisor."""
    a, s1, s2 = (float(np.reshape(v, -1)[0]) for v in (alpha, l1, l2))
    if scalar_form == "raw":
        threshold, divisor = a * s1, 1.0 + a * s2
    elif scalar_form == "folded":
        threshold, divisor = s1, s2
    else:
        threshold, divisor = s1, 1.0 / s2
    p = var - a * delta
    return _sign(p) * np.maximum(np.abs(p) - threshold, 0.0) / divisor


def l1_grad_sign_ge(predict: np.ndarray, label: np.ndarray, dout: np.ndarray, reduction: str) -> np.ndarray:
    """The L1 loss gradient as autodiff writes |x|'s derivative: +1 at x >= 0 (also at 0), else -1."""
    x = predict - label
    return _norm(predict, reduction) * dout * np.where(x >= 0, 1.0, -1.0)


def select_grad(predict: np.ndarray, label: np.ndarray, dout: np.ndarray, reduction: str, threshold: float,
                inner_slope: float, outer: float) -> np.ndarray:
    """dout * norm * (inner_slope * x if |x| < threshold else outer * sign(x)): SmoothL1's shape with
    constants that do not fit together (a kink that is not continuous)."""
    x = predict - label
    return _norm(predict, reduction) * dout * np.where(np.abs(x) < threshold, inner_slope * x, outer * _sign(x))


def two_mask_grad(predict: np.ndarray, label: np.ndarray, dout: np.ndarray, reduction: str,
                  sigma: float) -> np.ndarray:
    """dout * norm * (x/sigma * [|x| < sigma] + sign(x) * [|x| > sigma]): zero exactly at |x| == sigma."""
    x = predict - label
    ax = np.abs(x)
    return _norm(predict, reduction) * dout * (x / sigma * (ax < sigma) + _sign(x) * (ax > sigma))


def smooth_l1_grad_zero_at_minus_sigma(predict: np.ndarray, label: np.ndarray, dout: np.ndarray, reduction: str,
                                       sigma: float) -> np.ndarray:
    """SmoothL1's gradient except 0 at x == -sigma, where two tie-split derivatives cancel."""
    x = predict - label
    return np.where(x == -sigma, 0.0, smooth_l1_grad(predict, label, dout, sigma, reduction))


def sgd(var: np.ndarray, alpha: np.ndarray, delta: np.ndarray) -> np.ndarray:
    return var - float(np.reshape(alpha, -1)[0]) * delta


def l1_subgradient_step(var: np.ndarray, alpha: np.ndarray, l1: np.ndarray, l2: np.ndarray,
                        delta: np.ndarray) -> np.ndarray:
    """(var - alpha * (delta + l1 * sign(var))) / (1 + alpha * l2): the L1 penalty's subgradient step,
    which never lands on zero where the proximal step does."""
    a, s1, s2 = (float(np.reshape(v, -1)[0]) for v in (alpha, l1, l2))
    return (var - a * (delta + s1 * _sign(var))) / (1.0 + a * s2)


def shrink_without_sign(var: np.ndarray, alpha: np.ndarray, l1: np.ndarray, l2: np.ndarray,
                        delta: np.ndarray) -> np.ndarray:
    """max(|p| - alpha*l1, 0) / (1 + alpha*l2): the proximal step with sign(p) left out."""
    a, s1, s2 = (float(np.reshape(v, -1)[0]) for v in (alpha, l1, l2))
    p = var - a * delta
    return np.maximum(np.abs(p) - a * s1, 0.0) / (1.0 + a * s2)


def shrink_with_var_sign(var: np.ndarray, alpha: np.ndarray, l1: np.ndarray, l2: np.ndarray,
                         delta: np.ndarray) -> np.ndarray:
    """sign(var) * max(|p| - l1, 0) / l2 with p = var - alpha*delta (l1, l2 the folded threshold and
    divisor): the shrunk magnitude carrying var's sign, not p's."""
    a, threshold, divisor = (float(np.reshape(v, -1)[0]) for v in (alpha, l1, l2))
    p = var - a * delta
    return _sign(var) * np.maximum(np.abs(p) - threshold, 0.0) / divisor


FORMULAS: dict[str, Callable[..., np.ndarray]] = {
    "l1_grad_sign_ge": l1_grad_sign_ge,
    "select_grad": select_grad,
    "two_mask_grad": two_mask_grad,
    "smooth_l1_grad_zero_at_minus_sigma": smooth_l1_grad_zero_at_minus_sigma,
    "sgd": sgd,
    "l1_subgradient_step": l1_subgradient_step,
    "shrink_without_sign": shrink_without_sign,
    "shrink_with_var_sign": shrink_with_var_sign,
}


def instance_reference(inst: Mapping, values: Mapping[str, np.ndarray]) -> np.ndarray:
    """The float64 value of a fused-op instance ("attrs") on the bound inputs."""
    bound = {k: np.asarray(values[v] if isinstance(v, str) else v, np.float64) for k, v in inst["inputs"].items()}
    if inst["op"] == SMOOTH_L1_GRAD:
        return smooth_l1_grad(bound["predict"], bound["label"], bound["dout"], inst["sigma"], inst["reduction"],
                              inst.get("scale", 1.0))
    if inst["op"] == PROXIMAL_GD:
        return proximal_gd(bound["var"], bound["alpha"], bound["l1"], bound["l2"], bound["delta"],
                           inst["scalar_form"])
    raise ValueError(f"unknown op {inst['op']!r}")


def near_miss_reference(miss: Mapping, values: Mapping[str, np.ndarray]) -> np.ndarray:
    """The float64 value of the formula a near miss really computes."""
    bound = {k: np.asarray(values[v] if isinstance(v, str) else v, np.float64) for k, v in miss["inputs"].items()}
    return FORMULAS[miss["formula"]](**bound, **miss.get("params", {}))


# ----------------------------------------------------------------------------------------------
# Inputs, running, checking.

def entry_seed(entry: Mapping) -> int:
    """A fixed per-fixture seed, so a failure names data that can be reproduced."""
    return zlib.crc32(entry["file"].encode())


def _instances(entry: Mapping) -> list[Mapping]:
    return [*entry["attrs"], *(m["resembles"] for m in entry.get("near_misses", []))]


# the graph inputs that edge values go into, where an instance reads both directly
_PLACED = {SMOOTH_L1_GRAD: ("predict", "label"), PROXIMAL_GD: ("var", "delta")}


def make_feeds(entry: Mapping, rng: np.random.Generator, special: float | None = None) -> dict[str, np.ndarray]:
    """Random inputs of the manifest's shapes ("value": that value, "range": uniform, else normal
    times "scale"), with the edge values placed where a fused instance reads graph inputs directly;
    `special` (NaN, inf) goes into the first element of every such predict and var instead."""
    feeds = {}
    for name, spec in entry["inputs"].items():
        shape = tuple(spec["shape"])
        if "value" in spec:
            values = np.full(shape, spec["value"])
        elif "range" in spec:
            values = rng.uniform(*spec["range"], size=shape)
        else:
            values = rng.standard_normal(shape) * spec.get("scale", 1.0)
        feeds[name] = np.asarray(values).astype(NP_DTYPES[spec["dtype"]])
    for inst in _instances(entry):
        a, b = (inst["inputs"][k] for k in _PLACED[inst["op"]])
        if not (a in feeds and b in feeds):
            continue
        if special is not None:
            feeds[a].reshape(-1)[0] = special
        elif inst["op"] == SMOOTH_L1_GRAD:
            # (predict, label) pairs whose difference is exactly 0, -0 or +-sigma in the input dtype
            s = float(feeds[a].dtype.type(inst["sigma"]))
            pairs = [(0.0, 0.0), (-0.0, 0.0), (s, 0.0), (-s, 0.0), (0.0, s), (2 * s, s), (s / 2, 0.0)]
            k = min(len(pairs), feeds[a].size, feeds[b].size)
            feeds[a].reshape(-1)[:k] = np.array([p for p, _ in pairs[:k]]).astype(feeds[a].dtype)
            feeds[b].reshape(-1)[:k] = np.array([t for _, t in pairs[:k]]).astype(feeds[b].dtype)
        else:
            k = min(2, feeds[a].size, feeds[b].size)
            feeds[a].reshape(-1)[:k] = np.array([0.0, -0.0][:k]).astype(feeds[a].dtype)
            feeds[b].reshape(-1)[:k] = 0
    return feeds


def _to_ort(value: np.ndarray) -> ort.OrtValue:
    if value.dtype == ml_dtypes.bfloat16:
        # onnxruntime's numpy bridge has no bfloat16: hand it the raw bits
        bits = np.ascontiguousarray(value).view(np.uint16)
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, onnx.TensorProto.BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(value))


def _training_op_definitions(node: onnx.NodeProto) -> list[onnx.NodeProto]:
    """onnxruntime-training's training-only ops, which the inference build lacks, as the ONNX ops
    they are defined by: com.microsoft Scale(x, s) is x * s (x / s with scale_down), s cast to x's
    type; InPlaceAccumulatorV2(buffer, value, overwrite) adds value into buffer in place and
    returns the flag 'updated', always true."""
    h = onnx.helper
    if node.op_type == "Scale":
        down = any(a.name == "scale_down" and a.i for a in node.attribute)
        cast = f"{node.output[0]}__scale"
        return [h.make_node("CastLike", [node.input[1], node.input[0]], [cast]),
                h.make_node("Div" if down else "Mul", [node.input[0], cast], list(node.output))]
    if node.op_type == "InPlaceAccumulatorV2":
        true = h.make_tensor("t", onnx.TensorProto.BOOL, [1], [True])
        return [h.make_node("Constant", [], [node.output[0]], value=true)]
    raise ValueError(f"no ONNX definition for com.microsoft {node.op_type}")


TRAINING_ONLY_OPS = {"Scale", "InPlaceAccumulatorV2"}


def runnable_copy(model: onnx.ModelProto, fetch: list[str], elem_type: int) -> onnx.ModelProto:
    """A copy that onnxruntime's inference build runs and that outputs `fetch` too: training-only ops
    replaced by their definitions; intermediates made graph outputs (typed `elem_type`; a bfloat16
    one through an exact Cast to float32 named <name>__f32)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    nodes = []
    for node in probe.graph.node:
        training = node.domain == "com.microsoft" and node.op_type in TRAINING_ONLY_OPS
        nodes.extend(_training_op_definitions(node) if training else [node])
    del probe.graph.node[:]
    probe.graph.node.extend(nodes)
    types = {o.name: o.type.tensor_type.elem_type for o in probe.graph.output}
    for name in fetch:
        if name not in types:
            probe.graph.output.append(onnx.helper.make_tensor_value_info(name, elem_type, None))
            types[name] = elem_type
        if types[name] == onnx.TensorProto.BFLOAT16:
            probe.graph.node.append(onnx.helper.make_node("Cast", [name], [f"{name}__f32"], to=onnx.TensorProto.FLOAT))
            probe.graph.output.append(onnx.helper.make_tensor_value_info(f"{name}__f32", onnx.TensorProto.FLOAT, None))
    return probe


def run_model(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], fetch: list[str],
              dtype: str) -> dict[str, np.ndarray]:
    """The graph outputs and the named intermediates (of the entry's `dtype`) under onnxruntime
    without graph optimizations."""
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(NP_DTYPES[dtype]))
    names = list(dict.fromkeys([o.name for o in model.graph.output] + fetch))
    probe = runnable_copy(model, names, elem)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    bf16 = {o.name for o in probe.graph.output if o.name.endswith("__f32")}
    read = [f"{n}__f32" if f"{n}__f32" in bf16 else n for n in names]
    values = session.run_with_ort_values(read, {n: _to_ort(v) for n, v in feeds.items()})
    return {n: v.numpy().astype(ml_dtypes.bfloat16) if r in bf16 else v.numpy()
            for n, r, v in zip(names, read, values)}


def _checked_outputs(entry: Mapping) -> list[str]:
    return [i["output"] for i in entry["attrs"]] + [m["output"] for m in entry.get("near_misses", [])]


def _fetched(entry: Mapping) -> list[str]:
    """The checked outputs and the intermediates their references read (a predict that is a layer's output)."""
    bound = [v for i in (*entry["attrs"], *entry.get("near_misses", []), *_instances(entry))
             for v in i["inputs"].values() if isinstance(v, str) and v not in entry["inputs"]]
    return list(dict.fromkeys(_checked_outputs(entry) + bound))


def _first_difference(a: np.ndarray, b: np.ndarray, values: Mapping[str, np.ndarray], inputs: Mapping) -> dict | None:
    """The first element where two float64 results differ beyond float32 rounding, with the inputs there."""
    a, b = np.broadcast_arrays(a, b)
    differs = ~np.isclose(a, b, rtol=2.0**-13, atol=0.0, equal_nan=True)
    if not differs.any():
        return None
    i = int(np.flatnonzero(differs.reshape(-1))[0])
    at = {}
    for key, ref in inputs.items():
        value = np.asarray(values[ref] if isinstance(ref, str) else ref, np.float64)
        at[key] = float(np.broadcast_to(value, a.shape).reshape(-1)[i])
    return {"inputs": at, "resembled": float(a.reshape(-1)[i]), "computed": float(b.reshape(-1)[i])}


def check_new_entry(entry: Mapping, root: Path = REPO, seed: int | None = None) -> list[dict]:
    """Check one manifest entry; returns one row per checked output, raises AssertionError on failure.
    Each near miss's row carries "differs_at": where it differs from the instance it resembles."""
    seed = entry_seed(entry) if seed is None else seed
    where = f"{entry['file']} (seed {seed})"
    path = root / entry["file"]
    assert path.stat().st_size < MAX_FIXTURE_BYTES, f"{where}: {path.stat().st_size} bytes"
    model = onnx.load(path)
    onnx.checker.check_model(model)
    opset = {o.domain: o.version for o in model.opset_import}[""]
    assert opset == entry["opset"], f"{where}: opset {opset}, manifest says {entry['opset']}"
    counts = {op: sum(1 for i in entry["attrs"] if i["op"] == op) for op in (SMOOTH_L1_GRAD, PROXIMAL_GD)}
    assert counts == entry["expected"], f"{where}: attrs {counts}, expected {entry['expected']}"
    if entry["family"] == "near_miss":
        assert not entry["attrs"] and entry["near_misses"], f"{where}: a near miss lists no near_misses"
    feeds = make_feeds(entry, np.random.default_rng(seed))
    values = {**feeds, **run_model(model, feeds, _fetched(entry), entry["dtype"])}
    rows = []
    checks = [(i["output"], i["op"], instance_reference(i, values)) for i in entry["attrs"]]
    checks += [(m["output"], m["formula"], near_miss_reference(m, values)) for m in entry.get("near_misses", [])]
    for output, what, golden in checks:
        actual = values[output]
        result = compare(output, actual, np.broadcast_to(golden, actual.shape).astype(np.float64))
        assert result.passed, (f"{where}: {output} is not {what} of the manifest: MERE {result.mere:.3g}, "
                               f"MARE {result.mare:.3g}, T {result.threshold:.3g} {result.note}")
        rows.append({"output": output, "formula": what, "mere": result.mere, "mare": result.mare})
    for miss, row in zip(entry.get("near_misses", []), rows[len(entry["attrs"]):]):
        resembled = instance_reference(miss["resembles"], values)
        row["differs_at"] = _first_difference(resembled, near_miss_reference(miss, values), values,
                                              miss["resembles"]["inputs"])
        if "differs_at" in miss:
            assert miss["differs_at"] == row["differs_at"], \
                f"{where}: {miss['output']} differs elsewhere: {row['differs_at']}"
        if "same_values_but" in miss:
            assert row["differs_at"] is None, f"{where}: near miss {miss['output']} by rule differs in value"
        else:
            assert row["differs_at"], \
                f"{where}: near miss {miss['output']} equals the {miss['resembles']['op']} it resembles"
    recorded = entry.get("nonfinite_outputs", {})
    measured = nonfinite_outputs(entry, model)
    assert recorded == measured, f"{where}: non-finite inputs give {measured}, the manifest says {recorded}"
    return rows


SPECIAL_VALUES = {"nan": float("nan"), "inf": float("inf")}


def _value_class(value: float) -> str:
    if np.isnan(value):
        return "nan"
    if np.isinf(value):
        return "+inf" if value > 0 else "-inf"
    return "finite"


def _first_class(value: object) -> str:
    return _value_class(float(np.asarray(value, np.float64).reshape(-1)[0]))


def nonfinite_outputs(entry: Mapping, model: onnx.ModelProto) -> dict[str, dict[str, dict[str, str]]]:
    """For NaN and +inf placed in predict (var), where that is a graph input: the class of each
    checked output's element there, in the graph and in the contract of its instance."""
    read = [(i["output"], i) for i in entry["attrs"]]
    read += [(m["output"], m["resembles"]) for m in entry.get("near_misses", [])]
    read = [(o, inst) for o, inst in read if all(inst["inputs"][k] in entry["inputs"] for k in _PLACED[inst["op"]])]
    if not read:
        return {}
    result = {}
    for name, special in SPECIAL_VALUES.items():
        feeds = make_feeds(entry, np.random.default_rng(entry_seed(entry)), special)
        values = {**feeds, **run_model(model, feeds, _fetched(entry), entry["dtype"])}
        with np.errstate(invalid="ignore", over="ignore"):
            result[name] = {o: {"graph": _first_class(values[o]),
                                "contract": _first_class(instance_reference(inst, values))}
                            for o, inst in read}
    return result
