"""Graph builders for the pass tests.

`G` builds a graph value by value (each op returns its output's name); `sl1` and `pgd` use it to
build every form of the two families, and `splice` embeds one model in another. A test that spells
out a graph node by node writes its nodes with `onnx.helper.make_node` on named values and wraps
them with `graph_model`, taking constants from `const_node` (a Constant node) or `const_tensor` (an
initializer); `fuse_checked` and `assert_not_fused` run the pass on such a model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import lowering

F, H, BF = TP.FLOAT, TP.FLOAT16, TP.BFLOAT16
SL1, PGD = "SmoothL1LossGradV2", "ApplyProximalGradientDescent"
NP = {F: np.float32, H: np.float16, BF: ml_dtypes.bfloat16}


class G:
    """A small graph builder: values are names, ops return their output name."""

    def __init__(self, opset: int = 18) -> None:
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.n = 0

    def fresh(self, base: str = "v") -> str:
        self.n += 1
        return f"{base}{self.n}"

    def input(self, name: str, dtype: int = F, shape=(3, 4)) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, dtype, list(shape) if shape is not None else None))
        return name

    def const(self, value, dtype: int = F, shape=()) -> str:
        name = self.fresh("c")
        arr = np.full(shape, value, dtype=NP[dtype] if dtype in NP else np.float32)
        if dtype == BF:
            t = helper.make_tensor(name, BF, list(shape), arr.astype(np.float32).reshape(-1).tolist())
        else:
            t = numpy_helper.from_array(arr, name)
        self.inits.append(t)
        return name

    def const_node(self, value: float, dtype: int = F) -> str:
        out = self.fresh("k")
        self.nodes.append(helper.make_node("Constant", [], [out],
                                           value=numpy_helper.from_array(np.array(value, NP[dtype]))))
        return out

    def op(self, op_type: str, *inputs: str, **attrs) -> str:
        out = self.fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=f"n_{out}", **attrs))
        return out

    def output(self, name: str, dtype: int = F, shape=(3, 4)) -> None:
        self.outputs.append(helper.make_tensor_value_info(name, dtype, list(shape) if shape is not None else None))

    def model(self) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "g", self.inputs, self.outputs, initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        m.ir_version = 8
        return m


Shape = Sequence[int | str] | None


def const_tensor(name: str, value: float, dtype: int = F, shape: tuple[int, ...] = ()) -> onnx.TensorProto:
    """An initializer `name` of `shape` filled with `value` (rounded once to `dtype`)."""
    return numpy_helper.from_array(np.full(shape, value, np.float32).astype(NP[dtype]), name)


def const_node(name: str, value: float, dtype: int = F, shape: tuple[int, ...] = ()) -> onnx.NodeProto:
    """A Constant node computing `name`, filled as const_tensor fills an initializer."""
    return helper.make_node("Constant", [], [name], value=const_tensor(name, value, dtype, shape))


def graph_model(nodes: Iterable[onnx.NodeProto], inputs: dict[str, tuple[int, Shape]],
                outputs: dict[str, tuple[int, Shape]], initializers: Iterable[onnx.TensorProto] = (),
                opset: int = 17, name: str = "g") -> onnx.ModelProto:
    """A model of `nodes` with the given inputs and outputs (name -> (dtype, shape)), shapes inferred."""
    graph = helper.make_graph(list(nodes), name,
                              [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
                              [helper.make_tensor_value_info(n, t, s) for n, (t, s) in outputs.items()],
                              list(initializers))
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def fuse_checked(model: onnx.ModelProto) -> tuple[onnx.ModelProto, lowering.FusionReport]:
    """The pass's result, after the full ONNX checker accepted the fused model."""
    fused, report = lowering.fuse(model)
    onnx.checker.check_model(fused, full_check=True)
    return fused, report


def assert_not_fused(model: onnx.ModelProto, reason: str | None = None) -> lowering.FusionReport:
    """Nothing fuses; with `reason`, some near miss gives a reason containing it."""
    _, report = lowering.fuse(model)
    assert not report.fusions, report.summary()
    if reason is not None:
        assert any(reason in r.reason for r in report.rejections), report.summary()
    return report


@dataclass
class Case:
    name: str
    model: onnx.ModelProto
    expected: dict[str, int]
    attrs: dict[str, object] = field(default_factory=dict)
    edges: dict[str, float] = field(default_factory=dict)  # thresholds worth hitting exactly
    nonfinite_ok: bool = True  # False where the unfused graph itself mishandles inf (documented caveats)


# ---------------------------------------------------------------- SmoothL1 backward

def sl1(form: str = "where", beta: float = 0.5, reduction: str = "mean", dtype: int = F, cast_wrapped: bool = False,
        opset: int = 18, order: int = 0, dout_shape=(), shape=(3, 4), dynamic: bool = False,
        beta_const_node: bool = False) -> onnx.ModelProto:
    """SmoothL1 backward in one of its forms; `order` picks an operand order/grouping variant."""
    g = G(opset)
    ishape = ("N", shape[1]) if dynamic else shape
    p_in, l_in = g.input("predict", dtype, ishape), g.input("label", dtype, ishape)
    go_in = g.input("dout", dtype, ishape if dout_shape == "full" else dout_shape)
    cd = F if cast_wrapped else dtype
    if cast_wrapped:
        p, l, go = (g.op("Cast", v, to=F) for v in (p_in, l_in, go_in))
    else:
        p, l, go = p_in, l_in, go_in
    x = g.op("Sub", p, l)
    if reduction == "mean":
        if dynamic:
            n = g.op("Cast", g.op("Size", p), to=cd)
            gk = g.op("Div", go, n) if order % 2 == 0 else g.op("Mul", g.op("Reciprocal", n), go)
        else:
            norm = g.const(1.0 / np.prod(shape), cd)
            gk = g.op("Mul", go, norm) if order % 2 == 0 else g.op("Mul", norm, go)
    else:
        gk = go
    b = g.const_node(beta, cd) if beta_const_node else g.const(beta, cd)
    if form in ("where", "where_le", "where_ge", "where_not", "tf2onnx", "mask_ge", "mask_one_minus"):
        a = g.op("Abs", x)
        if order == 2:
            lin = g.op("Mul", g.op("Div", x, b), gk)
        elif order == 3:
            lin = g.op("Mul", x, g.op("Mul", gk, g.const(1.0 / beta if beta else 1.0, cd)))
        else:
            lin = g.op("Div", g.op("Mul", gk, x), b) if beta != 1.0 else g.op("Mul", x, gk)
        sgn = g.op("Mul", gk, g.op("Sign", x)) if order % 2 == 0 else g.op("Mul", g.op("Sign", x), gk)
        if form == "where":
            y = g.op("Where", g.op("Less", a, b), lin, sgn)
        elif form == "where_le":
            y = g.op("Where", g.op("LessOrEqual", a, b), lin, sgn)
        elif form == "where_ge":
            y = g.op("Where", g.op("GreaterOrEqual", a, b), sgn, lin)
        elif form == "where_not":
            y = g.op("Where", g.op("Not", g.op("Less", a, b)), sgn, lin)
        elif form == "tf2onnx":
            c = g.op("Less", a, b)
            y = g.op("Add", g.op("Mul", g.op("Cast", c, to=cd), lin),
                     g.op("Mul", sgn, g.op("Cast", g.op("Not", c), to=cd)))
        else:  # masks written by hand: (|x| < b).float() and (|x| >= b).float(), or 1 - the first
            m = g.op("Cast", g.op("Less", a, b), to=cd)
            other = (g.op("Cast", g.op("GreaterOrEqual", a, b), to=cd) if form == "mask_ge"
                     else g.op("Sub", g.const(1.0, cd), m))
            y = g.op("Add", g.op("Mul", m, lin), g.op("Mul", sgn, other))
    elif form == "clip":
        q = g.op("Div", x, b) if beta != 1.0 else x
        if opset >= 11:
            cl = g.op("Clip", q, g.const(-1.0, cd), g.const(1.0, cd))
        else:
            cl = g.op("Clip", q, min=-1.0, max=1.0)
        y = g.op("Mul", cl, gk)
    elif form in ("sign-min", "sign-min-ones-like"):  # sign(x) * min(|x|/beta, 1) * g
        one = g.const(1.0, cd, shape=shape if form == "sign-min-ones-like" else ())
        y = g.op("Mul", g.op("Mul", g.op("Sign", x), g.op("Min", g.op("Div", g.op("Abs", x), b), one)), gk)
    elif form == "sign-clip-max":  # sign(x) * Clip(|x|/beta, max=1) * g (torch.clamp(., max=1))
        y = g.op("Mul",
                 g.op("Mul", g.op("Sign", x), g.op("Clip", g.op("Div", g.op("Abs", x), b), "", g.const(1.0, cd))), gk)
    elif form == "select-sum":  # autograd of where(|x| < b, 0.5*|x|**2/b, |x| - 0.5*b), times sign(x)
        a = g.op("Abs", x)
        c = g.op("Less", a, b)
        zero = g.const(0.0, cd)
        inside = g.op("Mul", g.op("Mul", g.op("Div", g.op("Where", c, gk, zero), b), g.const(0.5, cd)),
                      g.op("Mul", g.op("Pow", a, g.const(1.0, cd)), g.const(2.0, cd)))
        y = g.op("Mul", g.op("Add", g.op("Where", c, zero, gk), inside), g.op("Sign", x))
    elif form in ("clip-delta", "minmax-delta"):  # the Huber gradient clamp(x, -delta, delta), delta = beta
        nb = g.const(-beta, cd)
        cl = g.op("Clip", x, nb, b) if form == "clip-delta" else g.op("Max", g.op("Min", x, b), nb)
        y = g.op("Mul", cl, gk)
    elif form in ("huber", "huber_swapped"):
        nb = g.const(-beta, cd)
        lo = g.op("Mul", g.op("Neg", gk), b)
        hi = g.op("Mul", gk, b)
        mid = g.op("Mul", x, gk)
        if form == "huber":
            y = g.op("Where", g.op("Less", x, nb), lo, g.op("Where", g.op("Greater", x, b), hi, mid))
        else:  # the high side tested first, written b < x
            y = g.op("Where", g.op("Less", b, x), hi, g.op("Where", g.op("Less", x, nb), lo, mid))
    else:
        raise ValueError(form)
    if cast_wrapped:
        y = g.op("Cast", y, to=dtype)
    g.output(y, dtype, ishape)
    return g.model()


# ---------------------------------------------------------------- proximal gradient descent

def pgd(clamp: str = "max", update: str = "sub", scalars: str = "const", scaling: str = "div", dtype: int = F,
        cast_wrapped: bool = False, opset: int = 18, shape=(3, 4), lr: float = 0.1, l1: float = 0.05,
        l2: float = 0.2, scalar_shape=(), shrink: str = "sign") -> onnx.ModelProto:
    g = G(opset)
    var_in, delta_in = g.input("var", dtype, shape), g.input("delta", dtype, shape)
    cd = F if cast_wrapped else dtype
    var, delta = (g.op("Cast", v, to=F) for v in (var_in, delta_in)) if cast_wrapped else (var_in, delta_in)
    if scalars == "const":
        a = g.const(lr, cd)
        t = g.const(lr * l1, cd)
        k = g.const(1 + lr * l2, cd)
    elif scalars == "raw":
        a = g.input("alpha", cd, scalar_shape)
        l1v = g.input("l1", cd, scalar_shape)
        l2v = g.input("l2", cd, scalar_shape)
        t = g.op("Mul", a, l1v)
        k = g.op("Add", g.const(1.0, cd), g.op("Mul", a, l2v))
    elif scalars == "folded":
        a = g.input("alpha", cd, scalar_shape)
        t = g.input("threshold", cd, scalar_shape)
        k = g.input("divisor", cd, scalar_shape)
    else:
        raise ValueError(scalars)
    if update == "sub":
        p = g.op("Sub", var, g.op("Mul", a, delta))
    elif update == "add_neg":
        na = g.const(-lr, cd) if scalars == "const" else g.op("Neg", a)
        p = g.op("Add", var, g.op("Mul", delta, na))
    else:
        raise ValueError(update)
    if shrink == "softshrink":
        s = g.op("Where", g.op("Greater", g.op("Abs", p), t), g.op("Sub", p, g.op("Mul", g.op("Sign", p), t)),
                 g.op("Mul", p, g.const(0.0, cd)))
    elif shrink in ("relu-diff", "relu-diff-max", "relu-diff-neg-sum"):  # relu(p - t) - relu(-p - t)
        minus_p = g.op("Neg", g.op("Add", p, t)) if shrink == "relu-diff-neg-sum" else g.op("Sub", g.op("Neg", p), t)
        if shrink == "relu-diff-max":
            s = g.op("Sub", g.op("Max", g.op("Sub", p, t), g.const(0.0, cd)), g.op("Max", minus_p, g.const(0.0, cd)))
        else:
            s = g.op("Sub", g.op("Relu", g.op("Sub", p, t)), g.op("Relu", minus_p))
    elif shrink == "relu-plus-min":  # relu(p - t) + min(p + t, 0)
        s = g.op("Add", g.op("Relu", g.op("Sub", p, t)), g.op("Min", g.op("Add", p, t), g.const(0.0, cd)))
    elif shrink == "where-small":  # Where(|p| <= t, 0, p - sign(p)*t)
        s = g.op("Where", g.op("LessOrEqual", g.op("Abs", p), t), g.const(0.0, cd),
                 g.op("Sub", p, g.op("Mul", g.op("Sign", p), t)))
    elif shrink == "min-residual":  # p - sign(p) * min(|p|, t)
        s = g.op("Sub", p, g.op("Mul", g.op("Sign", p), g.op("Min", g.op("Abs", p), t)))
    elif shrink == "abs-minus-min":  # sign(p) * (|p| - min(|p|, t))
        ap = g.op("Abs", p)
        s = g.op("Mul", g.op("Sign", p), g.op("Sub", ap, g.op("Min", ap, t)))
    elif shrink == "nested-where":  # Where(p > t, p - t, Where(p < -t, p + t, p*0)), a constant t
        inner = g.op("Where", g.op("Less", p, g.const(-lr * l1, cd)), g.op("Add", p, t),
                     g.op("Mul", p, g.const(0.0, cd)))
        s = g.op("Where", g.op("Greater", p, t), g.op("Sub", p, t), inner)
    elif shrink == "sign-abs-masked":  # sign(p) * (|p| - t) * Cast(|p| > t)
        ap = g.op("Abs", p)
        s = g.op("Mul", g.op("Mul", g.op("Sign", p), g.op("Sub", ap, t)), g.op("Cast", g.op("Greater", ap, t), to=cd))
    elif shrink in ("masked", "masked-ge"):  # (p - t*sign(p)) * Cast(|p| > t)
        mask = g.op("Cast", g.op("Greater" if shrink == "masked" else "GreaterOrEqual", g.op("Abs", p), t), to=cd)
        s = g.op("Mul", g.op("Sub", p, g.op("Mul", t, g.op("Sign", p))), mask)
    elif shrink in ("residual", "residual-minmax", "residual-maxmin"):  # p - clip(p, -t, t)
        nt = g.const(-lr * l1, cd) if scalars == "const" else g.op("Neg", t)
        if shrink == "residual-minmax":
            c = g.op("Min", g.op("Max", p, nt), t)
        elif shrink == "residual-maxmin":
            c = g.op("Max", g.op("Min", p, t), nt)
        elif opset >= 11:
            c = g.op("Clip", p, nt, t)
        else:
            c = g.op("Clip", p, min=-lr * l1, max=lr * l1)
        s = g.op("Sub", p, c)
    else:
        d = g.op("Sub", g.op("Abs", p), t)
        if clamp == "max":
            m = g.op("Max", d, g.const(0.0, cd))
        elif clamp == "relu":
            m = g.op("Relu", d)
        elif clamp == "clip":
            m = g.op("Clip", d, g.const(0.0, cd)) if opset >= 11 else g.op("Clip", d, min=0.0)
        else:
            raise ValueError(clamp)
        sign = (g.op("Where", g.op("GreaterOrEqual", p, g.const(0.0, cd)), g.const(1.0, cd), g.const(-1.0, cd))
                if shrink == "where-sign" else g.op("Sign", p))
        s = g.op("Mul", sign, m)
    if scaling == "div":
        y = g.op("Div", s, k)
    elif scaling == "recip":
        y = g.op("Mul", s, g.op("Reciprocal", k))
    elif scaling == "none":
        y = s
    else:
        raise ValueError(scaling)
    if cast_wrapped:
        y = g.op("Cast", y, to=dtype)
    g.output(y, dtype, shape)
    return g.model()


def autograd_where_loss(label_shape: tuple[int, ...], out_shape: tuple[int, ...] = (3, 4)) -> onnx.ModelProto:
    """autograd of torch.where(n < b, 0.5*n*n/b, n - 0.5*b).mean() with n = |p - t|, b = 0.5, p of
    shape (3, 4) and t of `label_shape`, as the dynamo exporter writes it: a sum of Wheres against
    0 (the upstream gradient expanded to `out_shape` over its numel), scaled by sign(x) afterwards."""
    g = G()
    p, t, go = g.input("predict"), g.input("label", shape=label_shape), g.input("dout", shape=())
    x = g.op("Sub", p, t)
    n = g.op("Abs", x)
    b = g.const(0.5)
    c = g.op("Less", n, b)
    zero = g.const(0.0)
    shape = g.fresh("shape")
    g.inits.append(numpy_helper.from_array(np.array(out_shape, np.int64), shape))
    d = g.op("Div", g.op("Expand", go, shape), g.const(float(np.prod(out_shape))))
    inside = g.op("Where", c, d, zero)
    outside = g.op("Where", c, zero, d)
    half = g.op("Div", inside, b)
    y = g.op("Mul", g.op("Add", g.op("Add", outside, g.op("Mul", half, g.op("Mul", n, b))),
                          g.op("Mul", g.op("Mul", half, n), b)), g.op("Sign", x))
    g.output(y, shape=out_shape)
    return g.model()


def splice(g: G, model: onnx.ModelProto, bind: dict[str, str], prefix: str) -> dict[str, str]:
    """Copies `model`'s nodes and initializers into g, its inputs bound to g's values by `bind`.

    Inputs not in `bind` become new graph inputs of g. Returns the renaming of every value.
    """
    rename: dict[str, str] = {"": ""}  # an optional input left out stays out
    for vi in model.graph.input:
        if vi.name in bind:
            rename[vi.name] = bind[vi.name]
        else:
            rename[vi.name] = f"{prefix}{vi.name}"
            copy = onnx.ValueInfoProto()
            copy.CopyFrom(vi)
            copy.name = rename[vi.name]
            g.inputs.append(copy)
    for t in model.graph.initializer:
        copy = onnx.TensorProto()
        copy.CopyFrom(t)
        copy.name = rename.setdefault(t.name, f"{prefix}{t.name}")
        g.inits.append(copy)
    for node in model.graph.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        for name in node.output:
            rename.setdefault(name, f"{prefix}{name}")
        copy.input[:] = [rename[n] for n in node.input]
        copy.output[:] = [rename[n] for n in node.output]
        copy.name = f"{prefix}{node.name}"
        g.nodes.append(copy)
    return rename
