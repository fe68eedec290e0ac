"""The kernel variants the twin tests run, as unfused ONNX graphs, plus their input data.

A variant is op x dtype x (reduction, dout kind and label kind | runtime or constant scalars);
each runs on every target. Broadcast variants give label (and dout) a shape that broadcasts to
predict's: a row, a column, or a rank-4 pattern with leading and inner 1s.
float16/bfloat16 graphs compute in float32 between Casts, as exporters write them.
Sizes rotate through three classes so every op, dtype and target meets each: a tail shorter than
one repeat (one core, DataCopyPad only, 2 to 63 elements), a split over all cores whose last core is partial, and
several double-buffered tiles per core with partial tails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

from codegen.api import artifact_for_target, kernel_for_spec
from codegen.nodes import InputSpec, NodeSpec
from codegen.project import OperatorProject, operator_projects
from codegen.targets import TARGETS
from contracts.fused_ops import OP_SPECS, PROXIMAL_GD, SCALAR_FORMS
from runtime.numerics import NUMPY_DTYPES
from runtime.precision import compare, subnormal_steps

OPSET = 17
DTYPES = ("float32", "float16", "bfloat16")
ELEM = {"float32": T.FLOAT, "float16": T.FLOAT16, "bfloat16": T.BFLOAT16}
SIZE_CLASSES = ("tail", "cores", "tiles")
PROX_SCALARS = (0.5, 0.1, 0.3)  # alpha, l1, l2
SCALARS = ("alpha", "l1", "l2")


@dataclass(frozen=True)
class Variant:
    op: str  # "sl1" or "prox"
    dtype: str
    reduction: str = "none"  # sl1
    scalar_dout: bool = False  # sl1: dout holds one element
    beta: float = 1.0  # sl1
    runtime_scalars: bool = False  # prox: alpha/l1/l2 are graph inputs
    label: str = "full"  # sl1: full, row, column or rank4 (see shapes_of)
    broadcast_dout: bool = False  # sl1: dout is a row that broadcasts to predict's shape
    huber: bool = False  # sl1: Huber's gradient (delta = beta), SmoothL1's times beta: the operator with scale

    @property
    def name(self) -> str:
        if self.op == "sl1":
            dout = "dout1" if self.scalar_dout else "doutRow" if self.broadcast_dout else "doutN"
            label = "" if self.label == "full" else f"-label{self.label.capitalize()}"
            kind = "huber" if self.huber else "sl1"
            return f"{kind}-{self.dtype}-{self.reduction}-{dout}-b{self.beta:g}{label}"
        return f"prox-{self.dtype}-{'runtime' if self.runtime_scalars else 'const'}"


def variants() -> list[Variant]:
    """Every emitted variant; beta rotates over 0 (pure sign), 0.5, 1 (no division) and 2."""
    out: list[Variant] = []
    betas = (0.5, 0.0, 1.0, 2.0)
    for dtype in DTYPES:
        for reduction in ("none", "mean", "sum"):
            for scalar_dout in (False, True):
                out.append(Variant("sl1", dtype, reduction, scalar_dout, betas[len(out) % len(betas)]))
        for runtime in (False, True):
            out.append(Variant("prox", dtype, runtime_scalars=runtime))
    # broadcast loads: three variants keep the twin's compile time down; tests/runtime and
    # tests/twin/test_twin_broadcast.py run more shapes ([1, 1], rank 5, the general path)
    # Huber's gradient is SmoothL1's with scale = delta: the project's own operator
    out += [Variant("sl1", "float32", "mean", beta=0.5, huber=True),
            Variant("sl1", "float16", "none", True, 2.0, huber=True, label="column"),
            Variant("sl1", "bfloat16", "sum", beta=1.5, huber=True)]
    out += [Variant("sl1", "float32", "mean", beta=0.5, label="row", broadcast_dout=True),
            Variant("sl1", "float16", "sum", True, 1.0, label="column"),
            Variant("sl1", "bfloat16", "none", beta=0.0, label="rank4", broadcast_dout=True)]
    return out


def shapes_of(v: Variant, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(predict, label, dout) shapes of an sl1 variant on about `shape`'s element count: a
    broadcast variant works on a 2-D (rank4: 4-D) predict of roughly as many elements."""
    if v.label == "full" and not v.broadcast_dout:
        out = shape
    else:
        n = int(np.prod(shape))
        rows = max(2, min(n // 2, int(np.sqrt(n)) // 3 + 2))
        out = (rows, max(2, n // rows))
        if v.label == "rank4":
            out = (2, max(1, rows // 2), 3, max(2, n // rows // 3))
    label = {"full": out, "row": out[-1:], "column": out[:-1] + (1,), "rank4": out[1:2] + (1,) + out[3:]}[v.label]
    dout = () if v.scalar_dout else out[-1:] if v.broadcast_dout else out
    return out, label, dout


def cases() -> list[tuple[Variant, str, str]]:
    """(variant, target, size class) for every variant on every target."""
    out = []
    for k, v in enumerate(variants()):
        for j, target in enumerate(TARGETS):
            out.append((v, target, SIZE_CLASSES[(k + j) % len(SIZE_CLASSES)]))
    return out


def size_of(size_class: str, target: str, rng: np.random.Generator) -> tuple[int, ...]:
    cores = TARGETS[target].aiv_cores
    if size_class == "tail":
        # from 2: with one-element var and delta the pass cannot tell delta from the scalar alpha
        return (int(rng.integers(2, 64)),)
    if size_class == "cores":
        per_core = int(rng.integers(1, 9)) * 64
        return (3, (cores - 1) * per_core // 3 + int(rng.integers(1, 64)))
    return (int(rng.integers(2 * 655360, 2 * 655360 + 999)),)


def _wrap_in(nodes: list, name: str, dtype: str) -> str:
    if dtype == "float32":
        return name
    nodes.append(h.make_node("Cast", [name], [f"{name}_f"], to=T.FLOAT))
    return f"{name}_f"


def _wrap_out(nodes: list, value: str, out: str, dtype: str) -> None:
    if dtype == "float32":
        nodes.append(h.make_node("Identity", [value], [out]))
    else:
        nodes.append(h.make_node("Cast", [value], [out], to=ELEM[dtype]))


def sl1_model(v: Variant, shape: tuple[int, ...]) -> onnx.ModelProto:
    """PyTorch's decomposition: Where(|x| < beta, g*x/beta, g*sign(x)), g = dout * norm."""
    shape, label_shape, dout_shape = shapes_of(v, shape)
    numel = int(np.prod(shape))
    nodes: list = []
    p, lab, d = (_wrap_in(nodes, n, v.dtype) for n in ("predict", "label", "dout"))
    inits = [h.make_tensor("beta", T.FLOAT, [], [v.beta])]
    g = d
    if v.reduction == "mean":
        inits.append(h.make_tensor("norm", T.FLOAT, [], [1.0 / numel]))
        nodes.append(h.make_node("Mul", [d, "norm"], ["g"]))
        g = "g"
    nodes += [h.make_node("Sub", [p, lab], ["x"]), h.make_node("Abs", ["x"], ["ax"]),
              h.make_node("Less", ["ax", "beta"], ["c"]), h.make_node("Mul", [g, "x"], ["gx"]),
              h.make_node("Sign", ["x"], ["sx"])]
    if v.huber:  # where(|x| < delta, g * x, g * delta * sign(x))
        nodes += [h.make_node("Mul", ["sx", "beta"], ["bsx"]), h.make_node("Mul", [g, "bsx"], ["sg"]),
                  h.make_node("Where", ["c", "gx", "sg"], ["y"])]
    else:
        nodes += [h.make_node("Div", ["gx", "beta"], ["lin"]), h.make_node("Mul", [g, "sx"], ["sg"]),
                  h.make_node("Where", ["c", "lin", "sg"], ["y"])]
    _wrap_out(nodes, "y", "gradient", v.dtype)
    e = ELEM[v.dtype]
    ins = [h.make_tensor_value_info("predict", e, list(shape)), h.make_tensor_value_info("label", e, list(label_shape)),
           h.make_tensor_value_info("dout", e, list(dout_shape))]
    graph = h.make_graph(nodes, "sl1", ins, [h.make_tensor_value_info("gradient", e, list(shape))], initializer=inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)])


def prox_model(v: Variant, shape: tuple[int, ...]) -> onnx.ModelProto:
    """TensorFlow's formula: sign(p) * max(|p| - alpha*l1, 0) / (1 + alpha*l2), p = var - alpha*delta.

    Runtime scalars are 0-D inputs in the tensor dtype; constant ones are float32 initializers.
    """
    nodes: list = []
    var, delta = (_wrap_in(nodes, n, v.dtype) for n in ("var", "delta"))
    e = ELEM[v.dtype]
    ins = [h.make_tensor_value_info("var", e, list(shape)), h.make_tensor_value_info("delta", e, list(shape))]
    inits = [h.make_tensor("zero", T.FLOAT, [], [0.0]), h.make_tensor("one", T.FLOAT, [], [1.0])]
    if v.runtime_scalars:
        ins += [h.make_tensor_value_info(n, e, []) for n in ("alpha", "l1", "l2")]
        a, l1, l2 = (_wrap_in(nodes, n, v.dtype) for n in ("alpha", "l1", "l2"))
    else:
        inits += [h.make_tensor(n, T.FLOAT, [], [x]) for n, x in zip(("alpha", "l1", "l2"), PROX_SCALARS)]
        a, l1, l2 = "alpha", "l1", "l2"
    nodes += [h.make_node("Mul", [delta, a], ["ad"]), h.make_node("Sub", [var, "ad"], ["p"]),
              h.make_node("Abs", ["p"], ["ap"]), h.make_node("Mul", [a, l1], ["t"]),
              h.make_node("Sub", ["ap", "t"], ["apt"]), h.make_node("Max", ["apt", "zero"], ["m"]),
              h.make_node("Sign", ["p"], ["sp"]), h.make_node("Mul", ["sp", "m"], ["num"]),
              h.make_node("Mul", [a, l2], ["al2"]), h.make_node("Add", ["one", "al2"], ["den"]),
              h.make_node("Div", ["num", "den"], ["y"])]
    _wrap_out(nodes, "y", "var_out", v.dtype)
    graph = h.make_graph(nodes, "prox", ins, [h.make_tensor_value_info("var_out", e, list(shape))], initializer=inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)])


def model_of(v: Variant, shape: tuple[int, ...]) -> onnx.ModelProto:
    return sl1_model(v, shape) if v.op == "sl1" else prox_model(v, shape)


def edge_values(dtype: str, beta: float) -> np.ndarray:
    """Exact thresholds, signed zeros, tiny and huge values, infinities, NaN, fp16 overflow."""
    big = 60000.0 if dtype == "float16" else 1e30
    return np.array([0.0, -0.0, beta, -beta, 2 * beta, big, -big, np.inf, -np.inf, np.nan, 1e-3, 3e-8, -5e-39,
                     65519.0, 70000.0])


def mixed(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, beta: float = 1.0) -> np.ndarray:
    """Normal values with every fifth element (at random places) an edge value."""
    n = int(np.prod(shape))
    x = rng.normal(0, 2, n)
    if n:
        k = max(1, n // 5)
        pos = rng.choice(n, size=k, replace=False)
        edges = edge_values(dtype, beta)
        x[pos] = edges[rng.integers(0, edges.size, k)]
    with np.errstate(over="ignore"):
        return x.astype(NUMPY_DTYPES[dtype]).reshape(shape)


def feeds_of(v: Variant, shape: tuple[int, ...], rng: np.random.Generator) -> dict[str, np.ndarray]:
    np_t = NUMPY_DTYPES[v.dtype]
    if v.op == "sl1":
        shape, label_shape, dout_shape = shapes_of(v, shape)
        p = mixed(rng, shape, v.dtype, v.beta)
        lab = mixed(rng, label_shape, v.dtype, v.beta)
        lab.reshape(-1)[: max(1, lab.size // 7)] = 0  # |p - l| == beta exactly: l = 0, p = +-beta
        zero = np.broadcast_to(lab, shape) == 0
        p[zero] = np.resize(np.array([v.beta, -v.beta]).astype(np_t), int(zero.sum()))
        dout = np.asarray(rng.normal(), np_t) if v.scalar_dout else mixed(rng, dout_shape, v.dtype)
        return {"predict": p, "label": lab, "dout": dout}
    feeds = {"var": mixed(rng, shape, v.dtype), "delta": mixed(rng, shape, v.dtype)}
    feeds["delta"].reshape(-1)[: feeds["delta"].size // 7] = 0  # |prox| == threshold where var is one
    if v.runtime_scalars:
        feeds.update({n: np.asarray(x, np_t) for n, x in zip(("alpha", "l1", "l2"), PROX_SCALARS)})
    return feeds


def prox_spec(dtype: str, scalar_dtypes: tuple[str, str, str], form: str, shrink_max: float, n: int = 64) -> NodeSpec:
    inputs = {"var": InputSpec(dtype, (n,)), "delta": InputSpec(dtype, (n,))}
    inputs.update({r: InputSpec(d, ()) for r, d in zip(SCALARS, scalar_dtypes)})
    order = {name: inputs[name] for name in OP_SPECS[PROXIMAL_GD].inputs}
    return NodeSpec("prox", PROXIMAL_GD, order, {"scalar_form": form, "shrink_max": shrink_max})


def prox_scalar_dtypes(dtype: str) -> list[tuple[str, str, str]]:
    """alpha, l1, l2 in the tensors' dtype, in float32, or (a folded form of a graph that computes
    alpha * l1 and 1 + alpha * l2 in float32) alpha alone in the tensors' dtype."""
    f = "float32"
    return list(dict.fromkeys([(dtype,) * 3, (f,) * 3, (dtype, f, f)]))


def prox_variant_specs() -> list[NodeSpec]:
    """One node per kernel variant: dtype x scalars' dtypes x scalar form x shrink_max (inf or finite)."""
    return [prox_spec(dtype, sdt, form, shrink)
            for dtype in DTYPES for sdt in prox_scalar_dtypes(dtype)
            for form in SCALAR_FORMS for shrink in (math.inf, 2.5)]


def prox_projects() -> list[OperatorProject]:
    """Per target, the operator projects of every ApplyProximalGradientDescent variant: CANN's
    operator (float, float16) and the project's own (the rest)."""
    specs = prox_variant_specs()
    return operator_projects([artifact_for_target(kernel_for_spec(s), t) for t in TARGETS for s in specs])


def within_standard(name: str, actual: np.ndarray, golden: np.ndarray) -> tuple[bool, str]:
    """The precision standard where the golden is a normal number of the output dtype, and at most
    one step apart where it is subnormal (runtime.precision.subnormal_steps: there the kernel and
    onnxruntime, rounding the same float32 value computed in a different order, fall on either
    side of a tie; seen: kernel 3.636e-6, onnxruntime 3.576e-6, exact 3.606e-6). One step is the
    most two correctly rounding implementations can promise each other.
    """
    a = np.asarray(actual).reshape(-1)
    g = np.asarray(golden).reshape(-1)
    tiny, steps = subnormal_steps(a.dtype, a, g)
    res = compare(name, a[~tiny], g[~tiny])
    worst = float(steps[tiny].max(initial=0.0))
    detail = f"{res}; {int(tiny.sum())} subnormal-range elements, worst {worst:g} steps apart"
    return res.passed and worst <= 1.0, detail


def differing(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Flat indices where a and b differ in bits, any NaN matching any NaN (see the variant tests)."""
    a = np.ascontiguousarray(a).reshape(-1)
    b = np.ascontiguousarray(b).reshape(-1)
    ua, ub = (x.view(np.uint32 if x.dtype.itemsize == 4 else np.uint16) for x in (a, b))
    with np.errstate(invalid="ignore"):
        nan_a = np.isnan(a.astype(np.float32))
        nan_b = np.isnan(b.astype(np.float32))
    return np.flatnonzero((ua != ub) & ~(nan_a & nan_b))
