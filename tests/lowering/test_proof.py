"""lowering.proof: the extended-real semantics against IEEE (numpy), and the proof gate on
regions that equal a fused op, that differ from it (each refusal naming an input and both
values), that differ only at +-inf or NaN (fused under assume_finite only) and that overflow."""

from __future__ import annotations

import math
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from lowering.proof import prove as prove_module
from lowering.proof.semantics import FIN, NAN, NINF, PINF, ExactBackend, Ext, Semantics
from lowering.rewrite import fuse_proto

N = 16
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SPECIALS = [0.0, 1.0, -1.0, 2.5, -0.75, 3.0e38, -3.0e38, math.inf, -math.inf, math.nan]


def _ext(m: Semantics, v: float) -> Ext:
    return m.const(v)


def _as_float(e: Ext | bool) -> float | bool:
    if isinstance(e, bool):
        return e
    return {FIN: None, PINF: math.inf, NINF: -math.inf, NAN: math.nan}[e.kind] if e.kind != FIN else float(e.real)


def _same(a: float | bool, b: float | bool) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) == bool(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "max", "min", "lt", "le", "eq"])
def test_binary_ops_match_ieee_on_specials(op: str) -> None:
    """Every pair of special values: the exact semantics gives what IEEE float64 gives (numpy),
    except the sign of a zero and a finite overflow (the reals do not overflow)."""
    m = Semantics(ExactBackend())
    numpy_op = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
                "max": lambda a, b: np.nan if np.isnan(a) or np.isnan(b) else max(a, b),
                "min": lambda a, b: np.nan if np.isnan(a) or np.isnan(b) else min(a, b),
                "lt": np.less, "le": np.less_equal, "eq": np.equal}[op]
    for a in SPECIALS:
        for b in SPECIALS:
            if op == "div" and b == 0.0 and a != 0.0 and not math.isnan(a):
                continue  # the sign of an infinity from a zero divisor is the zero's sign: not tracked
            with np.errstate(all="ignore"):
                want = numpy_op(np.float64(a), np.float64(b))
            got = _as_float(getattr(m, op)(_ext(m, a), _ext(m, b)))
            if isinstance(want, np.floating) and np.isinf(want) and math.isfinite(a) and math.isfinite(b):
                exact = {"add": Fraction(a) + Fraction(b), "sub": Fraction(a) - Fraction(b),
                         "mul": Fraction(a) * Fraction(b)}[op]  # float64 overflows; the reals do not
                assert got == float(exact), (op, a, b, got)
                continue
            assert _same(got, bool(want) if isinstance(want, np.bool_) else float(want)), (op, a, b, got, want)


@pytest.mark.parametrize("op", ["abs", "neg", "sign"])
def test_unary_ops_match_ieee_on_specials(op: str) -> None:
    m = Semantics(ExactBackend())
    numpy_op = {"abs": np.abs, "neg": np.negative, "sign": np.sign}[op]
    for a in SPECIALS:
        want = float(numpy_op(np.float64(a)))
        assert _same(_as_float(getattr(m, op)(_ext(m, a))), want), (op, a)


def test_shrink_maps_nan_to_zero_and_where_never_blends() -> None:
    m = Semantics(ExactBackend())
    lam, bias = m.const(0.5), m.const(0.5)
    assert _as_float(m.shrink(m.const(math.nan), lam, bias)) == 0.0
    assert _as_float(m.shrink(m.const(math.inf), lam, bias)) == math.inf
    assert _as_float(m.where(True, m.const(1.0), m.const(math.nan))) == 1.0


# -- the gate on small graphs -----------------------------------------------------------------

class _G:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def op(self, op_type: str, *inputs: str, **attrs: object) -> str:
        out = f"v{len(self.nodes)}"
        self.nodes.append(h.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def c(self, value: float) -> str:
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.array(value, np.float32), name))
        return name

    def model(self, inputs: list[str], output: str, scalars: tuple[str, ...] = ()) -> onnx.ModelProto:
        self.nodes.append(h.make_node("Identity", [output], ["out"]))
        vi = [h.make_tensor_value_info(n, T.FLOAT, () if n in scalars else (N,)) for n in inputs]
        graph = h.make_graph(self.nodes, "g", vi, [h.make_tensor_value_info("out", T.FLOAT, (N,))], self.inits)
        return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def _smooth_l1(g: _G, x: str, compare: str | None = None, linear: str | None = None, beta: float = 0.5) -> str:
    """PyTorch's decomposition: where(|x| < beta, g * x / beta, g * sign(x)), with the
    comparison or the linear branch replaced when given."""
    cond = compare or g.op("Less", g.op("Abs", x), g.c(beta))
    lin = linear or g.op("Div", g.op("Mul", "go", x), g.c(beta))
    return g.op("Where", cond, lin, g.op("Mul", "go", g.op("Sign", x)))


def _fuse(model: onnx.ModelProto, assume_finite: bool = False, by_meaning_only: bool = False):
    """The pass; `by_meaning_only` leaves out the spelled-out forms, so a refusal is the
    recogniser's (with its counterexample) rather than a form's reason."""
    prove_module.clear_cache()
    if by_meaning_only:
        return fuse_proto(model, patterns=(), assume_finite=assume_finite)
    return fuse_proto(model, assume_finite=assume_finite)


def _reasons(report) -> str:
    return " | ".join(r.reason for r in report.rejections)


_COUNTEREXAMPLE = re.compile(r"at \w+=[-0-9.e+inf]+.*the graph gives .*, the fused op ")


def test_pytorch_decomposition_is_proved() -> None:
    g = _G()
    _, report = _fuse(g.model(["p", "t", "go"], _smooth_l1(g, g.op("Sub", "p", "t"))))
    assert [f.op_type for f in report.fusions] == ["SmoothL1LossGradV2"], _reasons(report)
    assert report.fusions[0].attributes.get("nonfinite", "select") == "select"


def test_arithmetic_select_fuses_as_the_blend_variant() -> None:
    """tf2onnx's where: mask * branch + (1 - mask) * branch is NaN where x / beta is +-inf."""
    g = _G()
    x = g.op("Sub", "p", "t")
    mask = g.op("Less", g.op("Abs", x), g.c(0.5))
    inside = g.op("Mul", g.op("Cast", mask, to=T.FLOAT), g.op("Mul", x, g.c(2.0)))
    outside = g.op("Mul", g.op("Cast", g.op("Not", mask), to=T.FLOAT), g.op("Sign", x))
    out = g.op("Mul", g.op("Add", inside, outside), "go")
    _, report = _fuse(g.model(["p", "t", "go"], out))
    assert len(report.fusions) == 1, _reasons(report)
    assert report.fusions[0].attributes["nonfinite"] in ("blend", "blend_dout")


@pytest.mark.parametrize("case", ["measure_zero", "band_at_7_3", "capped_dout", "label_band"])
def test_near_misses_sampling_would_accept_are_refused_with_a_counterexample(case: str) -> None:
    g = _G()
    x = g.op("Sub", "p", "t")
    ax = g.op("Abs", x)
    if case == "measure_zero":  # |x| < b written as |p*p - t*t| < b * |p + t|: wrong where p == -t
        lhs = g.op("Abs", g.op("Sub", g.op("Mul", "p", "p"), g.op("Mul", "t", "t")))
        rhs = g.op("Mul", g.c(0.5), g.op("Abs", g.op("Add", "p", "t")))
        out = _smooth_l1(g, x, compare=g.op("Less", lhs, rhs))
    elif case == "band_at_7_3":  # a breakpoint that is no constant: 3 * |x| > 7 flips at 7/3
        scaled = g.op("Mul", g.c(3.0), ax)
        band = g.op("And", g.op("Greater", scaled, g.c(7.0)), g.op("Less", scaled, g.c(7.01)))
        out = _smooth_l1(g, x, compare=g.op("Or", g.op("Less", ax, g.c(0.5)), band))
    elif case == "capped_dout":  # min(dout, 8) in one branch
        lin = g.op("Div", g.op("Mul", g.op("Min", "go", g.c(8.0)), x), g.c(0.5))
        out = _smooth_l1(g, x, linear=lin)
    else:  # the label inside a band far from 0 changes the result
        near = g.op("And", g.op("Greater", "t", g.c(999.0)), g.op("Less", "t", g.c(1001.0)))
        out = _smooth_l1(g, x, compare=g.op("And", g.op("Less", ax, g.c(0.5)), g.op("Not", near)))
    _, report = _fuse(g.model(["p", "t", "go"], out), by_meaning_only=True)
    assert not report.fusions, [f.attributes for f in report.fusions]
    assert report.rejections and any(_COUNTEREXAMPLE.search(r.reason) or "over the reals they differ at" in r.reason
                                     for r in report.rejections), _reasons(report)


def test_a_sigma_no_single_constant_holds_is_derived_exactly() -> None:
    """|x| < 2^-25 * 2^-25: sigma is 2^-50, not 0 (no flat sample decides it)."""
    g = _G()
    x = g.op("Sub", "p", "t")
    tiny = g.op("Mul", g.c(2.0**-25), g.c(2.0**-25))
    out = g.op("Where", g.op("Less", g.op("Abs", x), tiny), g.op("Div", g.op("Mul", "go", x), tiny),
               g.op("Mul", "go", g.op("Sign", x)))
    _, report = _fuse(g.model(["p", "t", "go"], out))
    assert [f.attributes["sigma"] for f in report.fusions] == [2.0**-50], _reasons(report)


def test_a_square_that_overflows_far_inside_the_range_is_refused() -> None:
    """x * relu(|x| - b) / (|x| * relu(|x| - b)) is sign(x) over the reals where |x| > b, but its
    numerator overflows float32 from |x| = 1.9e19 while the result is +-1."""
    g = _G()
    x = g.op("Sub", "p", "t")
    r = g.op("Relu", g.op("Sub", g.op("Abs", x), g.c(0.5)))
    ratio = g.op("Div", g.op("Mul", x, r), g.op("Mul", g.op("Abs", x), r))
    cond = g.op("Less", g.op("Abs", x), g.c(0.5))
    out = g.op("Mul", "go", g.op("Where", cond, g.op("Div", x, g.c(0.5)), ratio))
    _, report = _fuse(g.model(["p", "t", "go"], out))
    assert not report.fusions
    assert any("overflow" in r.reason or "differ" in r.reason for r in report.rejections), _reasons(report)


@pytest.mark.parametrize("assume_finite", [False, True])
def test_a_difference_where_only_an_unused_branch_overflows_is_refused(assume_finite: bool) -> None:
    """PyTorch's decomposition, its sign branch doubled where go * x exceeds float32's range
    (computed from scaled-down factors, which do not overflow): at go = 1e10, x = 1e30 the graph
    gives 2e10 and the op 1e10, while only the linear branch, which the Where does not take there,
    overflows. The overflow of an unused value must not hide the difference."""
    g = _G()
    x = g.op("Sub", "p", "t")
    huge = g.op("Greater", g.op("Mul", g.op("Mul", "go", g.c(1e-20)), g.op("Mul", x, g.c(1e-20))), g.c(0.034))
    factor = g.op("Add", g.op("Cast", huge, to=T.FLOAT), g.c(1.0))
    sign_branch = g.op("Mul", g.op("Mul", "go", g.op("Sign", x)), factor)
    linear = g.op("Div", g.op("Mul", "go", x), g.c(0.5))
    out = g.op("Where", g.op("Less", g.op("Abs", x), g.c(0.5)), linear, sign_branch)
    model = g.model(["p", "t", "go"], out, scalars=("go",))
    _, report = _fuse(model, assume_finite=assume_finite, by_meaning_only=True)
    assert not report.fusions, _reasons(report)


def test_a_difference_only_at_nonfinite_inputs_fuses_under_assume_finite_only() -> None:
    """tf.compat.v1.losses.huber_loss's gradient with a runtime weights tensor, as tf2onnx writes
    it: the SmoothL1 gradient for every finite input, NaN where the weights or x are +-inf in a
    way none of the op's non-finite variants has."""
    model = onnx.load(FIXTURES / "tf2onnx" / "nm_sl1_v1_huber_runtime_weight_f32_op13.onnx")
    _, strict = _fuse(model, by_meaning_only=True)
    assert not strict.fusions
    assert any("non-finite" in r.reason for r in strict.rejections), _reasons(strict)
    _, relaxed = _fuse(model, assume_finite=True)
    assert [f.op_type for f in relaxed.fusions] == ["SmoothL1LossGradV2"], _reasons(relaxed)
    assert relaxed.fusions[0].assumed_finite
    assert any("assume_finite" in c for c in relaxed.fusions[0].caveats)


def test_one_proof_serves_a_form_whose_constants_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Twenty copies of one form with twenty betas: the solver runs for the first only."""
    g = _G()
    outs = []
    for k in range(20):
        x = g.op("Sub", f"p{k}", f"t{k}")
        beta = 0.5 + k / 64
        cond = g.op("Less", g.op("Abs", x), g.c(beta))
        lin = g.op("Div", g.op("Mul", f"go{k}", x), g.c(beta))
        outs.append(g.op("Where", cond, lin, g.op("Mul", f"go{k}", g.op("Sign", x))))
    total = outs[0]
    for o in outs[1:]:
        total = g.op("Concat", total, o, axis=0)
    inputs = [f"{r}{k}" for k in range(20) for r in ("p", "t", "go")]
    model = g.model(inputs, total)
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 20 * N
    decided = []
    real = prove_module._decide
    monkeypatch.setattr(prove_module, "_decide", lambda *a, **k: decided.append(1) or real(*a, **k))
    _, report = _fuse(model)
    assert len(report.fusions) == 20, _reasons(report)
    assert len(decided) <= 2, len(decided)
