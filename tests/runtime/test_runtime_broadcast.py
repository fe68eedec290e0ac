"""SmoothL1LossGradV2 with a label and dout that broadcast to predict's shape, on the CPU backend
(the kernel IR run tile by tile through its plan): against the float64 formula, against
onnxruntime on the unfused graph, through the aclnn shim, and at the edges (0, +-0, |x| == sigma,
sigma = 0, inf/nan, empty tensors, float16 overflow)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from codegen.api import artifact_for_target, kernel_for_spec
from codegen.nodes import InputSpec, NodeSpec
from contracts.fused_ops import REDUCTIONS, SMOOTH_L1_GRAD, smooth_l1_grad_reference
from lowering import fuse
from runtime import aclnn
from runtime.acl import AclnnStatus, tensor_from_numpy, tensor_to_numpy
from runtime.backend import KernelCall
from runtime.backends.cpu import CpuBackend, plan_tiles
from runtime.graph_exec import run_fused_model
from runtime.interpreter import KernelExecutionError, execute
from runtime.numerics import NUMPY_DTYPES
from runtime.ort_exec import run_model
from runtime.precision import compare, subnormal_steps

CPU = CpuBackend()
DTYPES = ("float32", "float16", "bfloat16")
ELEM = {"float32": T.FLOAT, "float16": T.FLOAT16, "bfloat16": T.BFLOAT16}
# (predict, label, dout): rows, columns, [1, 1], leading 1s, rank 5, sizes no tile divides
SHAPES = [
    ((37, 229), (229,), ()),
    ((37, 229), (37, 1), (229,)),
    ((300, 7), (1, 1), (300, 1)),
    ((2, 3, 4, 5, 6), (1, 3, 1, 5, 1), (4, 1, 6)),
    ((3, 1, 5, 2, 67), (5, 1, 1), (1, 1, 1, 2, 67)),
    ((5000, 3), (3,), (5000, 1)),
    ((6, 40000), (6, 1), (40000,)),  # a column of long rows: the general path
]


def _edges(dtype: str, sigma: float) -> np.ndarray:
    big = 60000.0 if dtype == "float16" else 1e30
    return np.array([0.0, -0.0, sigma, -sigma, big, -big, np.inf, -np.inf, np.nan, 70000.0])


def _mixed(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, sigma: float) -> np.ndarray:
    x = rng.normal(0, 2, shape).reshape(-1)
    if x.size:
        pos = rng.choice(x.size, size=max(1, x.size // 6), replace=False)
        edges = _edges(dtype, sigma)
        x[pos] = edges[np.arange(pos.size) % edges.size]
    with np.errstate(over="ignore"):
        return x.astype(NUMPY_DTYPES[dtype]).reshape(shape)


def _inputs(rng, shapes, dtype: str, sigma: float) -> dict[str, np.ndarray]:
    ps, ls, ds = shapes
    lab = _mixed(rng, ls, dtype, sigma)
    lab.reshape(-1)[: max(1, lab.size // 5)] = 0
    p = _mixed(rng, ps, dtype, sigma)
    zero = np.broadcast_to(lab, ps) == 0  # |p - l| == sigma exactly where the label reads 0
    p[zero] = np.resize(np.array([sigma, -sigma]).astype(NUMPY_DTYPES[dtype]), int(zero.sum()))
    d = rng.normal(0, 1, ds).astype(NUMPY_DTYPES[dtype])
    return {"predict": p, "label": lab, "dout": np.asarray(d)}


def _spec(x: dict[str, np.ndarray], dtype: str, sigma: float, reduction: str, scale: float) -> NodeSpec:
    return NodeSpec("n", SMOOTH_L1_GRAD, {r: InputSpec(dtype, tuple(v.shape)) for r, v in x.items()},
                    {"sigma": float(sigma), "reduction": reduction, "scale": scale})


def _within_standard(actual: np.ndarray, golden: np.ndarray, where: str) -> None:
    """The standard where the golden is a normal number, one step apart at most where subnormal."""
    a, g = actual.reshape(-1), golden.reshape(-1)
    tiny, steps = subnormal_steps(a.dtype, a, g)
    res = compare("gradient", a[~tiny], g[~tiny])
    assert res.passed and steps[tiny].max(initial=0.0) <= 1.0, f"{where}: {res}"


@pytest.mark.parametrize("shapes", SHAPES, ids=[f"{s[0]}-{s[1]}-{s[2]}" for s in SHAPES])
@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_label_and_dout_match_the_float64_formula(shapes, dtype, rng: np.random.Generator) -> None:
    for reduction, sigma in zip(REDUCTIONS, (0.5, 0.0, 1.0)):
        x = _inputs(rng, shapes, dtype, sigma)
        # a mean's norm is 1/numel(predict); the scale keeps float16 out of its subnormals
        scale = 300.0 if reduction == "mean" else 0.75
        call = KernelCall(_spec(x, dtype, sigma, reduction, scale), x, "ascend910b")
        got = CPU.run(call)["gradient"]
        assert got.shape == shapes[0] and got.dtype == NUMPY_DTYPES[dtype], call.spec
        with np.errstate(all="ignore"):
            golden = smooth_l1_grad_reference(x["predict"], x["label"], x["dout"], float(np.float32(sigma)),
                                              reduction, scale).astype(NUMPY_DTYPES[dtype])
        _within_standard(got, golden, f"{shapes} {dtype} {reduction} sigma={sigma}")


def _unfused(shapes, dtype: str, sigma: float, mean: bool) -> onnx.ModelProto:
    """PyTorch's decomposition, Cast-wrapped for float16/bfloat16: Where(|x| < sigma, g*x/sigma,
    g*sign(x)), x = p - t, g = dout (/ numel for the mean)."""
    ps, ls, ds = shapes
    nodes, inits = [], [h.make_tensor("sigma", T.FLOAT, [], [sigma])]
    names = {}
    for n in ("predict", "label", "dout"):
        if dtype == "float32":
            names[n] = n
        else:
            nodes.append(h.make_node("Cast", [n], [f"{n}_f"], to=T.FLOAT))
            names[n] = f"{n}_f"
    g = names["dout"]
    if mean:
        inits.append(h.make_tensor("norm", T.FLOAT, [], [1.0 / int(np.prod(ps))]))
        nodes.append(h.make_node("Mul", [g, "norm"], ["g"]))
        g = "g"
    nodes += [h.make_node("Sub", [names["predict"], names["label"]], ["x"]), h.make_node("Abs", ["x"], ["ax"]),
              h.make_node("Less", ["ax", "sigma"], ["c"]), h.make_node("Mul", [g, "x"], ["gx"]),
              h.make_node("Div", ["gx", "sigma"], ["lin"]), h.make_node("Sign", ["x"], ["sx"]),
              h.make_node("Mul", [g, "sx"], ["sg"]), h.make_node("Where", ["c", "lin", "sg"], ["y"])]
    nodes.append(h.make_node("Identity" if dtype == "float32" else "Cast", ["y"], ["gradient"],
                             **({} if dtype == "float32" else {"to": ELEM[dtype]})))
    e = ELEM[dtype]
    graph = h.make_graph(nodes, "sl1", [h.make_tensor_value_info(n, e, list(s)) for n, s in
                                        zip(("predict", "label", "dout"), shapes)],
                         [h.make_tensor_value_info("gradient", e, list(ps))], initializer=inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("shapes", SHAPES[:5], ids=[f"{s[0]}-{s[1]}-{s[2]}" for s in SHAPES[:5]])
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_fused_graph_matches_onnxruntime_on_the_unfused_graph(shapes, dtype, rng: np.random.Generator) -> None:
    mean = dtype == "float32"  # float16/bfloat16 means of these sizes would be mostly subnormal
    model = _unfused(shapes, dtype, 0.5, mean)
    fused, report = fuse(model)
    assert report.counts() == {SMOOTH_L1_GRAD: 1}, report.summary()
    node = next(n for n in fused.graph.node if n.op_type == SMOOTH_L1_GRAD)
    assert list(node.input[:2]) == ["predict", "label"]  # read as they are: no Expand before the node
    x = _inputs(rng, shapes, dtype, 0.5)
    got, runs = run_fused_model(fused, x, CPU, "ascend950")
    assert [r.error for r in runs] == [""]
    golden = run_model(model, x)["gradient"]
    _within_standard(got["gradient"], golden, f"{shapes} {dtype}")


@pytest.mark.parametrize("shapes", [((0, 5), (5,), ()), ((4, 0), (4, 1), (0,)), ((0, 3), (1, 1), (1, 3))])
def test_empty_tensors_launch_nothing(shapes) -> None:
    x = {r: np.zeros(s, np.float32) for r, s in zip(("predict", "label", "dout"), shapes)}
    out = CPU.run(KernelCall(_spec(x, "float32", 1.0, "sum", 1.0), x, "ascend950"))["gradient"]
    assert out.shape == shapes[0] and out.size == 0


def test_the_aclnn_shim_broadcasts_in_the_kernel_and_refuses_what_does_not_broadcast(rng) -> None:
    p = rng.normal(size=(6, 50)).astype(np.float16)
    lab = rng.normal(size=(50,)).astype(np.float16)
    d = rng.normal(size=(6, 1)).astype(np.float16)
    out = tensor_from_numpy(np.zeros((6, 50), np.float16))
    status, ws, executor = aclnn.aclnnSmoothL1LossBackwardGetWorkspaceSize(
        tensor_from_numpy(d), tensor_from_numpy(p), tensor_from_numpy(lab), 2, 0.5, out)
    assert status == AclnnStatus.SUCCESS
    assert executor.call.spec.inputs["label"].shape == (50,)  # handed over unexpanded
    assert aclnn.aclnnSmoothL1LossBackward(None, ws, executor, None) == AclnnStatus.SUCCESS
    golden = smooth_l1_grad_reference(p, lab, d, 0.5, "sum").astype(np.float16)
    assert compare("out", tensor_to_numpy(out), golden).passed
    status, _, _ = aclnn.aclnnSmoothL1LossBackwardGetWorkspaceSize(
        tensor_from_numpy(d), tensor_from_numpy(p), tensor_from_numpy(rng.normal(size=(49,)).astype(np.float16)),
        2, 0.5, tensor_from_numpy(np.zeros((6, 50), np.float16)))
    assert status == AclnnStatus.PARAM_INVALID == 161002


def test_the_interpreter_fails_a_tile_that_reads_outside_its_window_or_table(rng) -> None:
    shapes = ((640, 30), (640, 1), ())
    x = _inputs(rng, shapes, "float32", 0.5)
    art = artifact_for_target(kernel_for_spec(_spec(x, "float32", 0.5, "sum", 1.0)), "ascend910b")
    plan = art.schedule(640 * 30, {r: v.shape for r, v in x.items()})
    b, = plan.broadcasts
    for broken, match in ((replace(b, window_elems=1), "reads outside the 1 elements of its window"),
                          (replace(b, table_elems=256), "period table of label")):
        with pytest.raises(KernelExecutionError, match=match):
            execute(art.kernel, plan_tiles(plan), x, 640 * 30, alloc=art.allocation, broadcasts=(broken,))
