"""Property test of ApplyProximalGradientDescent: every kernel variant on the twin with its GM
bounds checks on, against the CPU backend (bit for bit, with the same bounds checks) and the
float64 contract (the precision standard).

Drawn per case, from the test's seed (printed; a failure's report gives it, `--seed N` reruns):
each target, each variant of the operator (dtype, the scalars' dtype, scalar form, shrink_max),
one-element tensors, tails shorter than a repeat, multi-core splits and several tiles per core;
scalars from the contract's draws. Every launch's GM buffers sit back to back in one arena, in
a drawn order, the way an allocator's arena (onnxruntime's, the device's) places them: the
layout in which a tensor's end is the next buffer's start, so the bounds checks must attribute
each address to the right buffer.

At model level: var [unk__6, C] and delta [unk__7, C] (dims named apart, the tf2onnx form), one
dim name, or static, with constant or runtime alpha, l1 and l2, fused and run as `lower --verify`
runs them.

Compile cost: one operator project per target holds every variant (three g++ runs; the twin
fixture compiles them with the other kernels, and every twin test shares them).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from twin_cases import ELEM, OPSET, SCALARS, differing, mixed, prox_spec, prox_variant_specs, within_standard

from codegen.nodes import NodeSpec
from codegen.targets import TARGETS
from contracts.fused_ops import OP_SPECS, PROXIMAL_GD, proximal_scalars
from lowering import fuse
from runtime.backend import KernelCall
from runtime.diff import diff_models
from runtime.graph_exec import run_fused_model
from runtime.numerics import NUMPY_DTYPES
from runtime.report import DiffReport

DTYPES = ("float32", "float16", "bfloat16")


def _size(kind: str, target: str, rng: np.random.Generator) -> int:
    if kind == "one":
        return 1
    if kind == "tail":
        return int(rng.integers(2, 64))
    cores = TARGETS[target].aiv_cores
    if kind == "cores":
        return (cores - 1) * int(rng.integers(1, 5)) * 64 + int(rng.integers(1, 64))
    return int(rng.integers(2 * 655360, 2 * 655360 + 999))  # several double-buffered tiles per core


def _scalars(spec: NodeSpec, rng: np.random.Generator) -> dict[str, float]:
    """alpha, l1, l2 as the form takes them, from the contract's draws of the raw values."""
    draws = OP_SPECS[PROXIMAL_GD].scalar_draws
    raw = {r: float(rng.choice(d.fixed)) if rng.random() < 0.3 else float(rng.uniform(d.low, d.high))
           for r, d in ((r, draws[r]) for r in SCALARS)}
    a, l1, l2 = raw["alpha"], raw["l1"], raw["l2"]
    form = spec.attrs["scalar_form"]
    if form == "raw":
        return raw
    if form == "folded":
        return {"alpha": a, "l1": a * l1, "l2": 1 + a * l2}
    return {"alpha": a, "l1": a * l1, "l2": 1 / (1 + a * l2)}


def _golden(x: dict[str, np.ndarray], attrs: dict) -> np.ndarray:
    """The float64 contract, from the float32 values the float32 compute must cancel against:
    prox = var - alpha * delta and the threshold rounded to float32 (as the kernel, and
    onnxruntime on the unfused graph, compute them). Near |prox| == threshold the result is a
    cancellation, exact in float32 (Sterbenz) but only as exact as its two operands; the float64
    contract of the unrounded operands would hold the kernel to digits no float32 compute has."""
    f32 = np.float32
    a = f32(x["alpha"].reshape(-1)[0])
    l1, l2 = (float(x[r].reshape(-1)[0]) for r in ("l1", "l2"))
    threshold, divisor = proximal_scalars(float(a), l1, l2, str(attrs["scalar_form"]))
    if attrs["scalar_form"] == "raw":
        threshold = float(a * f32(l1))
    prox = x["var"].astype(f32) - a * x["delta"].astype(f32)
    rounded = {"var": prox, "alpha": np.zeros(1), "l1": np.float64(f32(threshold)), "l2": np.float64(divisor),
               "delta": np.zeros_like(prox)}
    return OP_SPECS[PROXIMAL_GD].golden(rounded, {"scalar_form": "folded", "shrink_max": attrs["shrink_max"]})[0]


def packed(arrays: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The arrays copied into one arena, back to back with no gap, in a drawn order."""
    names = list(arrays)
    rng.shuffle(names)
    total = sum(arrays[n].nbytes for n in names)
    arena = np.zeros(max(total, 1), np.uint8)
    out, at = {}, 0
    for name in names:
        a = arrays[name]
        view = arena[at:at + a.nbytes].view(a.dtype).reshape(a.shape)
        view[...] = a
        out[name] = view
        at += a.nbytes
    return out


def test_every_variant_on_back_to_back_gm_buffers(twin, cpu, seed):
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    for t, target in enumerate(TARGETS):
        for k, spec in enumerate(prox_variant_specs()):
            dtype = spec.inputs["var"].dtype
            sdt = tuple(spec.inputs[r].dtype for r in SCALARS)
            sizes = ["one", "tail", "tiles" if (t + k) % 21 == 0 else "cores"]
            for kind in sizes:
                n = _size(kind, target, rng)
                scalars = _scalars(spec, rng)
                data = {"var": mixed(rng, (n,), dtype), "delta": mixed(rng, (n,), dtype)}
                data["delta"][: n // 7] = 0  # |prox| == threshold where var is one
                data.update({r: np.asarray(scalars[r], NUMPY_DTYPES[d]) for r, d in zip(SCALARS, sdt)})
                data["var_out"] = np.empty(n, NUMPY_DTYPES[dtype])
                gm = packed(data, rng)
                out = gm.pop("var_out")
                call = KernelCall(prox_spec(dtype, sdt, str(spec.attrs["scalar_form"]),
                                        float(spec.attrs["shrink_max"]), n), gm, target)  # type: ignore[arg-type]
                where = f"seed {seed}, {target}, {dtype} scalars {'/'.join(sdt)} {spec.attrs}, {n} elements ({kind})"
                got = twin.launch(call, {"var_out": out})["var_out"]
                want = cpu.run(call)["var_out"]
                bad = differing(got, want)
                assert bad.size == 0, f"{where}: {bad.size} elements differ from the CPU backend, first at {bad[:5]}"
                with np.errstate(over="ignore", invalid="ignore"):
                    golden = _golden(gm, spec.attrs).astype(NUMPY_DTYPES[dtype])
                    ok, detail = within_standard("var_out", got, golden)
                assert ok, f"{where}: {detail}"


def _model(dtype: str, runtime: bool, dims: str, cols: int):
    """TensorFlow's formula on var and delta of [d0, cols], their first dims per `dims`:
    apart (unk__6, unk__7), same (one name) or static (4)."""
    d_var, d_delta = {"apart": ("unk__6", "unk__7"), "same": ("unk__6", "unk__6"), "static": (4, 4)}[dims]
    e = ELEM[dtype]
    nodes: list = []

    def wrap(name: str) -> str:
        if dtype == "float32":
            return name
        nodes.append(h.make_node("Cast", [name], [f"{name}_f"], to=T.FLOAT))
        return f"{name}_f"

    ins = [h.make_tensor_value_info("var", e, [d_var, cols]), h.make_tensor_value_info("delta", e, [d_delta, cols])]
    var, delta = wrap("var"), wrap("delta")
    inits = [h.make_tensor("zero", T.FLOAT, [], [0.0]), h.make_tensor("one", T.FLOAT, [], [1.0])]
    if runtime:
        ins += [h.make_tensor_value_info(n, e, []) for n in SCALARS]
        a, l1, l2 = (wrap(n) for n in SCALARS)
    else:
        inits += [h.make_tensor(n, T.FLOAT, [], [x]) for n, x in zip(SCALARS, (0.5, 0.1, 0.3))]
        a, l1, l2 = SCALARS
    nodes += [h.make_node("Mul", [a, delta], ["ad"]), h.make_node("Sub", [var, "ad"], ["p"]),
              h.make_node("Sign", ["p"], ["s"]), h.make_node("Abs", ["p"], ["ap"]),
              h.make_node("Mul", [a, l1], ["t"]), h.make_node("Sub", ["ap", "t"], ["apt"]),
              h.make_node("Max", ["apt", "zero"], ["m"]), h.make_node("Mul", ["s", "m"], ["num"]),
              h.make_node("Mul", [a, l2], ["al2"]), h.make_node("Add", ["one", "al2"], ["den"]),
              h.make_node("Div", ["num", "den"], ["y"])]
    if dtype == "float32":
        nodes.append(h.make_node("Identity", ["y"], ["var_out"]))
    else:
        nodes.append(h.make_node("Cast", ["y"], ["var_out"], to=e))
    out = h.make_tensor_value_info("var_out", e, [d_var if dims != "apart" else "unk__8", cols])
    graph = h.make_graph(nodes, "prox", ins, [out], initializer=inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)])


@pytest.mark.parametrize("dims", ["apart", "same", "static"])
def test_models_with_dims_named_apart_verify_on_the_twin(dims, twin, cpu, seed):
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    for t, target in enumerate(TARGETS):
        for k, dtype in enumerate(DTYPES):
            if dims == "apart" and dtype == "bfloat16":
                continue  # the fused model's Expand of a bfloat16 input is one onnxruntime lacks
            for runtime in (False, True):
                cols = (16, 1, 37)[(t + k) % 3]
                unfused = _model(dtype, runtime, dims, cols)
                fused, report = fuse(unfused)
                assert len(report.fusions) == 1, report.summary()
                rows = 4 if dims == "static" else int(rng.choice([1, int(rng.integers(2, 9)), 97]))
                np_t = NUMPY_DTYPES[dtype]
                feeds = {"var": mixed(rng, (rows, cols), dtype), "delta": mixed(rng, (rows, cols), dtype)}
                if runtime:
                    feeds.update({n: np.asarray(v, np_t) for n, v in zip(SCALARS, _scalars(
                        prox_spec(dtype, (dtype,) * 3, "raw", math.inf), rng).values())})
                source = "runtime" if runtime else "constant"
                where = f"seed {seed}, {target}, {dtype}, {source} scalars, [{rows}, {cols}]"
                diff = DiffReport("unfused", "fused", twin.name, target, where)
                diff_models(unfused, fused, packed(feeds, rng), twin, target, diff)
                assert diff.passed, f"{where}: {[r.to_json() for r in diff.failures()]}"
                _, twin_runs = run_fused_model(fused, feeds, twin, target)
                _, cpu_runs = run_fused_model(fused, feeds, cpu, target)
                for tr, cr in zip(twin_runs, cpu_runs):
                    assert tr.error == cr.error == "", where
                    bad = differing(tr.outputs["var_out"], cr.outputs["var_out"])
                    assert bad.size == 0, f"{where}: {bad.size} elements differ from the CPU backend"
