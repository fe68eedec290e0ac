"""A mutation fuzzer over the spellings of the fused ops' contracts (lowering.proof's adversary).

A *spelling* is one ONNX graph of SmoothL1LossGradV2 or ApplyProximalGradientDescent as an exporter
might write it; its body is written against a `Builder` whose hooks (constants, comparisons, uses
of runtime scalars, named intermediate values, the output) are the *sites* a mutation operator may
change. A *mutation operator* takes a spelling, picks a site and returns a `Mutation`: how to
rewrite that site, whether the result is meant to differ from the contract, and the input points
where it is meant to differ.

The oracle is onnxruntime against the fused op's float64 reference (OP_SPECS[op].golden with the
attributes the spelling intends), held to the CANN precision standard (runtime.precision):
`classify` runs the unfused mutant at the proposed points and keeps the first one where it differs
from every non-finite variant of the op (and where the unmutated spelling agrees with the
reference) as the WITNESS. A mutant meant to differ whose points show no difference is discarded
with a note; a mutant meant to be equal is checked on a battery of points, and one that differs
there is a generator error (never counted as either).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from contracts.fused_ops import OP_SPECS, PROXIMAL_GD, SMOOTH_L1_GRAD
from runtime.precision import compare

F32, F16, BF16 = T.FLOAT, T.FLOAT16, T.BFLOAT16
NP = {F32: np.float32, F16: np.float16}
FLOAT_MAX = {F32: float(np.finfo(np.float32).max), F16: float(np.finfo(np.float16).max)}
# battery points stay this far inside the range: nearer, a constant scaling done in another order
# may overflow (lowering.proof allows that, as rounding)
NEAR_RANGE = {F32: 2.0**-24, F16: 2.0**-6}
DYNAMIC_N = 8  # the element count of a dynamic dim unless a point asks for another
OUT = "out"
COMMUTATIVE = frozenset({"Add", "Mul", "Max", "Min", "Equal", "And"})

Point = dict[str, float]  # input name -> the value every element takes; "numel" -> element count


@dataclass(frozen=True)
class Site:
    kind: str  # const | compare | scalar | value | div
    index: int  # the k-th site of its kind, in build order
    role: str
    info: tuple = ()  # const: (value,); compare: (op, tie_agrees); scalar: (name,); div: (divisor,)


@dataclass
class Mutation:
    operator: str
    description: str
    site: Site | None
    apply: Callable[..., Any]
    intent: str  # differs | equal | nonfinite (differs only at +-inf / NaN inputs)
    points: list[Point] = field(default_factory=list)  # where it is meant to differ


class Builder:
    """Builds a spelling's graph; a mutation rewrites the one site it names."""

    def __init__(self, sp: Spelling, mutation: Mutation | None = None) -> None:
        self.sp = sp
        self.mutation = mutation
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.sites: list[Site] = []
        self.values: dict[str, str] = {}  # role of a value site -> its (unmutated) graph value
        self._count: dict[str, int] = {}
        self._inside = False

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        out = f"v{len(self.nodes)}"
        if op_type in COMMUTATIVE and len(inputs) == 2 and not self._inside:
            _, hit = self._site("comm", op_type, ())
            if hit:
                inputs = inputs[::-1]
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def _apply(self, *args: Any) -> Any:
        """The mutation at its site; what it adds holds no sites of its own."""
        assert self.mutation is not None
        self._inside = True
        try:
            return self.mutation.apply(*args)
        finally:
            self._inside = False

    def lit(self, value: float, dtype: int | None = None) -> str:
        """A constant no mutation touches (what a mutation itself adds)."""
        name = f"k{len(self.inits)}"
        t = NP[dtype or self.sp.dtype]
        self.inits.append(numpy_helper.from_array(np.array(value, t), name))
        return name

    def _site(self, kind: str, role: str, info: tuple) -> tuple[Site, bool]:
        k = self._count.get(kind, 0)
        self._count[kind] = k + 1
        s = Site(kind, k, role, info)
        self.sites.append(s)
        hit = self.mutation is not None and self.mutation.site == s
        return s, hit

    def const(self, value: float, role: str = "") -> str:
        _, hit = self._site("const", role, (value,))
        return self.lit(self._apply(value) if hit else value)

    def compare(self, op: str, a: str, b: str, role: str = "", tie_agrees: bool = True) -> str:
        _, hit = self._site("compare", role, (op, tie_agrees))
        return self._apply(self, op, a, b) if hit else self.op(op, a, b)

    def scalar(self, name: str) -> str:
        """A use of a scalar input: the graph input when runtime, else its constant."""
        value = self.sp.scalars.get(name)
        _, hit = self._site("scalar", name, (name, value is None))
        ref = name if value is None else self.lit(value)
        return self._apply(self, ref) if hit else ref

    def value(self, v: str, role: str) -> str:
        self.values.setdefault(role, v)
        _, hit = self._site("value", role, ())
        return self._apply(self, v) if hit else v

    def div(self, v: str, divisor: float, role: str = "") -> str:
        """v / divisor (a constant); a mutation may write it as a product with 1/divisor."""
        _, hit = self._site("div", role, (divisor,))
        if hit:
            return self._apply(self, v, divisor)
        return self.op("Div", v, self.lit(divisor))


@dataclass
class Spelling:
    """One graph of a fused op's contract. `attrs` are the attributes the spelling intends;
    `scalars` maps each scalar input to its constant, or None when it is a runtime input (then
    `draws` gives the value probes use)."""

    family: str  # sl1 | prox
    name: str
    body: Callable[[Builder], str]
    attrs: dict[str, object]
    dtype: int = F32
    dynamic: bool = False
    scalars: dict[str, float | None] = field(default_factory=dict)
    draws: dict[str, float] = field(default_factory=dict)
    scalar_shape: tuple[int, ...] = ()
    shape: tuple[int, ...] = (8,)
    opset: int = 17

    @property
    def op_type(self) -> str:
        return SMOOTH_L1_GRAD if self.family == "sl1" else PROXIMAL_GD

    @property
    def tensors(self) -> tuple[str, ...]:
        return ("predict", "label") if self.family == "sl1" else ("var", "delta")

    @property
    def label(self) -> str:
        kind = "dyn" if self.dynamic else "static"
        return f"{self.family}/{self.name}[{np.dtype(NP[self.dtype]).name},{kind}]"

    def build(self, mutation: Mutation | None = None) -> tuple[onnx.ModelProto, Builder]:
        b = Builder(self, mutation)
        y = b.value(self.body(b), "out")
        if y in {i for i, _ in self._inputs()} or y.startswith("k"):
            y = b.op("Identity", y)
        for node in b.nodes:  # the result is the graph output "out"
            for k, o in enumerate(node.output):
                if o == y:
                    node.output[k] = OUT
        dims: list[int | str] = ["n"] if self.dynamic else list(self.shape)
        inputs = [helper.make_tensor_value_info(n, self.dtype, dims if n in self.tensors else list(self.scalar_shape))
                  for n, _ in self._inputs()]
        graph = helper.make_graph(b.nodes, "mutant", inputs, [helper.make_tensor_value_info(OUT, self.dtype, dims)],
                                  b.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 8
        return model, b

    def _inputs(self) -> list[tuple[str, bool]]:
        names = list(self.tensors) + [n for n, v in self.scalars.items() if v is None]
        return [(n, n in self.tensors) for n in names]

    def scalar_value(self, name: str, point: Point) -> float:
        v = self.scalars.get(name)
        return float(point.get(name, self.draws.get(name, 1.0))) if v is None else float(v)

    # -- points ----------------------------------------------------------------------------------
    def at_x(self, x: float, label: float = 0.0, **scalars: float) -> Point:
        """A point where the difference (predict - label, or var - alpha*delta) is x; `label` is
        the second tensor's value."""
        a, b = self.tensors
        shift = label if self.family == "sl1" else label * scalars.get("alpha", self.scalar_value("alpha", {}))
        return {a: x + shift, b: label, **scalars}

    def norm(self, point: Point) -> float:
        if self.attrs.get("reduction") != "mean":
            return 1.0
        return 1.0 / self.numel(point)

    def numel(self, point: Point) -> int:
        return int(point.get("numel", DYNAMIC_N)) if self.dynamic else math.prod(self.shape)

    def feeds(self, point: Point) -> dict[str, np.ndarray]:
        t = NP[self.dtype]
        shape = (self.numel(point),) if self.dynamic else self.shape
        out: dict[str, np.ndarray] = {}
        with np.errstate(over="ignore"):
            for name, is_tensor in self._inputs():
                if is_tensor:
                    out[name] = np.full(shape, point.get(name, 0.0), np.float64).astype(t)
                else:
                    out[name] = np.full(self.scalar_shape, self.scalar_value(name, point), np.float64).astype(t)
        return out

    def golden(self, point: Point, variant: dict[str, object] | None = None) -> np.ndarray:
        f = {k: np.asarray(v, np.float64) for k, v in self.feeds(point).items()}
        if self.family == "sl1":
            given = {"predict": f["predict"], "label": f["label"], "dout": self._scalar64("dout", point)}
        else:
            given = {"var": f["var"], "delta": f["delta"],
                     **{s: self._scalar64(s, point) for s in ("alpha", "l1", "l2")}}
        with np.errstate(all="ignore"):
            return OP_SPECS[self.op_type].golden(given, {**self.attrs, **(variant or {})})[0]

    def _scalar64(self, name: str, point: Point) -> np.ndarray:
        with np.errstate(over="ignore"):
            return np.asarray(np.asarray(self.scalar_value(name, point)).astype(NP[self.dtype]), np.float64)

    def variants(self) -> list[dict[str, object]]:
        spec = OP_SPECS[self.op_type].proof
        assert spec is not None and spec.nonfinite is not None
        name, values = spec.nonfinite
        return [{name: v} for v in values]

    def battery(self) -> list[Point]:
        """Points away from the kinks (where rounding decides) and the range's edge, each piece,
        signed zeros, +-inf and NaN in each tensor."""
        scale = self.kink()
        xs = [0.0, -0.0, 0.37 * scale, -0.61 * scale, 1.7 * scale + 0.3, -3.1 * scale - 1.0, 1234.5, -0.0007]
        out = [self.at_x(x) for x in xs] + [self.at_x(x, label=3.25) for x in xs[2:5]]
        for s in self.runtime_scalars():
            out += [self.at_x(x, **{s: self.draws[s] * 0.5}) for x in xs[2:6]]
        if "dout" in self.runtime_scalars():
            out += [self.at_x(x, dout=-2.5) for x in xs[2:6]]
        a, b = self.tensors
        for bad in (math.inf, -math.inf, math.nan):
            out += [{a: bad, b: 0.5}, {a: 0.25, b: bad}, {a: bad, b: bad}]
        if self.dynamic:
            out += [{**p, "numel": 3} for p in out[:4]]
        return out

    def runtime_scalars(self) -> list[str]:
        return [n for n, v in self.scalars.items() if v is None]

    def kink(self) -> float:
        """Where the function changes piece, in the difference: sigma, or the threshold."""
        if self.family == "sl1":
            return float(self.attrs["sigma"]) or 1.0  # type: ignore[arg-type]
        alpha = self.scalar_value("alpha", {})
        return alpha * self.scalar_value("l1", {}) or 1.0


# -- the oracle --------------------------------------------------------------------------------

class Runner:
    """onnxruntime sessions, one per model, graph optimizations off."""

    def __init__(self, model: onnx.ModelProto) -> None:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.log_severity_level = 3
        self.session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])

    def __call__(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return np.asarray(self.session.run([OUT], feeds)[0])


def differs(actual: np.ndarray, golden: np.ndarray) -> bool:
    """Beyond the CANN precision standard (NaN and inf positions included)."""
    with np.errstate(over="ignore"):
        g = golden.astype(actual.dtype).astype(np.float64)  # the reference as the output type holds it
    return not compare("out", actual, g).passed


def finite_point(point: Point) -> bool:
    return all(math.isfinite(v) for v in point.values())


def far_inside(sp: Spelling, point: Point) -> bool:
    top = FLOAT_MAX[sp.dtype] * NEAR_RANGE[sp.dtype]
    values = [v for k, v in point.items() if k != "numel"] + [sp.scalar_value(s, point) for s in sp.runtime_scalars()]
    if not all(abs(v) < top for v in values if math.isfinite(v)):
        return False
    g = sp.golden(point)
    return bool(np.all(~np.isfinite(g) | (np.abs(g) < top)))


@dataclass
class Case:
    """A mutant with its verdict from onnxruntime."""

    spelling: Spelling
    mutation: Mutation | None  # None: the spelling itself
    model: onnx.ModelProto
    kind: str  # differs | nonfinite | equal | discarded | generator-error
    witness: Point | None = None
    note: str = ""

    @property
    def operator(self) -> str:
        return self.mutation.operator if self.mutation else "spelling"

    def describe(self) -> str:
        what = self.mutation.description if self.mutation else "unmutated"
        at = f" witness {format_point(self.witness)}" if self.witness else ""
        note = f" - {self.note}" if self.note else ""
        return f"{self.spelling.label} {self.operator}: {what} [{self.kind}]{at}{note}"


def format_point(p: Point) -> str:
    return ", ".join(f"{k}={v:.9g}" for k, v in p.items())


def own_variant(sp: Spelling, base: Runner) -> dict[str, object]:
    """The non-finite variant of the op the unmutated spelling computes (the first that agrees with
    it on every battery point)."""
    for v in sp.variants():
        if not any(differs(base(sp.feeds(p)), sp.golden(p, v)) for p in sp.battery()):
            return v
    raise AssertionError(f"{sp.label} agrees with no variant of {sp.op_type} on its battery")


def classify(sp: Spelling, mutation: Mutation | None, base: Runner | None = None,
             own: dict[str, object] | None = None) -> Case:
    """The mutant's verdict from onnxruntime: differs (with a finite witness), nonfinite (differs
    from every non-finite variant of the op, only at +-inf/NaN inputs), equal, discarded (meant to
    differ, no difference shown) or generator-error (meant to be equal, and is not)."""
    model, _ = sp.build(mutation)
    run = Runner(model)
    base = base or Runner(sp.build()[0])
    own = own if own is not None else own_variant(sp, base)

    def off(runner: Runner, point: Point, variant: dict[str, object]) -> bool:
        return differs(runner(sp.feeds(point)), sp.golden(point, variant))

    usable = [p for p in (mutation.points if mutation else []) if finite_point(p) and far_inside(sp, p)]
    if mutation is not None and mutation.intent == "differs":
        for point in usable:
            if off(run, point, own) and not off(base, point, own):
                return Case(sp, mutation, model, "differs", point)
    battery = sp.battery()
    finite = [p for p in battery if finite_point(p) and far_inside(sp, p)]
    bad = next((p for p in finite if off(run, p, own) and not off(base, p, own)), None)
    if bad is not None:
        if mutation is not None and mutation.intent == "differs":
            return Case(sp, mutation, model, "differs", bad)
        return Case(sp, mutation, model, "generator-error", bad, "meant to be equal at finite inputs, and is not")
    if mutation is not None and mutation.intent == "differs":
        return Case(sp, mutation, model, "discarded", None,
                    f"onnxruntime shows no difference beyond the precision standard at its {len(usable)} points")
    special = [p for p in (mutation.points if mutation else []) + battery if not finite_point(p)]
    for variant in [own] + [v for v in sp.variants() if v != own]:
        if not any(off(run, p, variant) for p in special):
            note = "" if variant == own else f"equal to the op's {variant}"
            return Case(sp, mutation, model, "equal", None, note)
    witness = next(p for p in special if off(run, p, own))
    if mutation is None or mutation.intent == "equal":
        return Case(sp, mutation, model, "generator-error", witness, "meant to be equal, differs at +-inf/NaN")
    return Case(sp, mutation, model, "nonfinite", witness)


# -- spellings ---------------------------------------------------------------------------------

def _sl1_g(b: Builder) -> str:
    """dout times the reduction's norm and the scale: g of the contract."""
    sp = b.sp
    g = b.scalar("dout")
    if sp.attrs["reduction"] == "mean":
        n = b.op("Cast", b.op("Size", "predict"), to=sp.dtype)
        g = b.op("Div", g, b.value(n, "numel"))
    return g


def sl1_where(b: Builder) -> str:
    """PyTorch's decomposition: where(|x| < beta, g*x/beta, g*sign(x))."""
    beta = float(b.sp.attrs["sigma"])  # type: ignore[arg-type]
    x = b.value(b.op("Sub", "predict", "label"), "x")
    c = b.compare("Less", b.op("Abs", x), b.const(beta, "sigma"), "abs-x<sigma", tie_agrees=True)
    # each branch reads dout itself, as the dynamo exporter writes it
    inside = b.div(b.op("Mul", _sl1_g(b), x), beta, "sigma")
    outside = b.op("Mul", _sl1_g(b), b.op("Sign", x))
    return b.op("Where", c, inside, outside)


def sl1_clip(b: Builder) -> str:
    """clip(x / beta, -1, 1) * g."""
    beta = float(b.sp.attrs["sigma"])  # type: ignore[arg-type]
    x = b.value(b.op("Sub", "predict", "label"), "x")
    ratio = b.div(x, beta, "sigma")
    return b.op("Mul", b.op("Clip", ratio, b.const(-1.0, "low"), b.const(1.0, "high")), _sl1_g(b))


def sl1_huber(b: Builder) -> str:
    """Nested-Where Huber gradient with delta: where(x < -d, -d*g, where(x > d, d*g, x*g))."""
    d = float(b.sp.attrs["sigma"])  # type: ignore[arg-type]
    x = b.value(b.op("Sub", "predict", "label"), "x")
    g = _sl1_g(b)
    low = b.compare("Less", x, b.const(-d, "-delta"), "x<-delta", tie_agrees=True)
    high = b.compare("Greater", x, b.const(d, "delta"), "x>delta", tie_agrees=True)
    inner = b.op("Where", high, b.op("Mul", g, b.const(d, "delta")), b.op("Mul", x, g))
    return b.op("Where", low, b.op("Mul", g, b.const(-d, "-delta")), inner)


def sl1_tf2onnx(b: Builder) -> str:
    """tf2onnx's arithmetic select: Cast(c)*(x/beta*g) + (sign(x)*g)*Cast(Not(c))."""
    beta = float(b.sp.attrs["sigma"])  # type: ignore[arg-type]
    dt = b.sp.dtype
    x = b.value(b.op("Sub", "predict", "label"), "x")
    c = b.compare("Less", b.op("Abs", x), b.const(beta, "sigma"), "abs-x<sigma", tie_agrees=True)
    inside = b.op("Mul", b.op("Cast", c, to=dt), b.op("Mul", b.div(x, beta, "sigma"), _sl1_g(b)))
    outside = b.op("Mul", b.op("Mul", b.op("Sign", x), _sl1_g(b)), b.op("Cast", b.op("Not", c), to=dt))
    return b.op("Add", inside, outside)


def sl1_sign(b: Builder) -> str:
    """beta = 0: sign(x) * g."""
    x = b.value(b.op("Sub", "predict", "label"), "x")
    return b.op("Mul", b.op("Sign", x), _sl1_g(b))


def _prox_p(b: Builder) -> str:
    return b.value(b.op("Sub", "var", b.op("Mul", b.scalar("alpha"), "delta")), "p")


def _prox_threshold(b: Builder) -> str:
    return b.op("Mul", b.scalar("alpha"), b.scalar("l1"))


def _prox_divisor(b: Builder) -> str:
    return b.op("Add", b.const(1.0, "one"), b.op("Mul", b.scalar("alpha"), b.scalar("l2")))


def prox_sign_max(b: Builder) -> str:
    """sign(p) * max(|p| - t, 0) / k."""
    p = _prox_p(b)
    shrunk = b.op("Max", b.op("Sub", b.op("Abs", p), _prox_threshold(b)), b.const(0.0, "floor"))
    return b.op("Div", b.op("Mul", b.op("Sign", p), shrunk), _prox_divisor(b))


def prox_relu(b: Builder) -> str:
    """sign(p) * relu(|p| - t) * (1 / k) (a reciprocal multiply)."""
    p = _prox_p(b)
    shrunk = b.op("Relu", b.op("Sub", b.op("Abs", p), _prox_threshold(b)))
    return b.op("Mul", b.op("Mul", b.op("Sign", p), shrunk), b.op("Reciprocal", _prox_divisor(b)))


def prox_clip(b: Builder) -> str:
    """(p - clip(p, -t, t)) / k."""
    p = _prox_p(b)
    t = _prox_threshold(b)
    return b.op("Div", b.op("Sub", p, b.op("Clip", p, b.op("Neg", t), t)), _prox_divisor(b))


def prox_where(b: Builder) -> str:
    """where(p > t, p - t, where(p < -t, p + t, 0)) / k (NaN to 0: the nan_to_zero variant)."""
    p = _prox_p(b)
    t = _prox_threshold(b)
    high = b.compare("Greater", p, t, "p>t", tie_agrees=True)
    low = b.compare("Less", p, b.op("Neg", t), "p<-t", tie_agrees=True)
    inner = b.op("Where", low, b.op("Add", p, t), b.const(0.0, "zero"))
    return b.op("Div", b.op("Where", high, b.op("Sub", p, t), inner), _prox_divisor(b))


SL1_BODIES = {"where": sl1_where, "clip": sl1_clip, "huber": sl1_huber, "tf2onnx": sl1_tf2onnx, "sign": sl1_sign}
PROX_BODIES = {"sign-max": prox_sign_max, "relu": prox_relu, "clip": prox_clip, "where-chain": prox_where}
SIGMAS = (0.5, 1.0, 0.25, 2.0, 0.75, 3.0)


def spellings(rng: np.random.Generator, count: int) -> list[Spelling]:
    """`count` random spellings (both families, both dtypes, static and dynamic shapes, runtime
    and constant scalars)."""
    out = []
    for k in range(count):
        family = "sl1" if k % 2 == 0 else "prox"
        dtype = F16 if rng.random() < 0.2 else F32
        dynamic = bool(rng.random() < 0.3)
        opset = int(rng.choice([17, 18]))
        if family == "sl1":
            name = str(rng.choice(list(SL1_BODIES)))
            sigma = 0.0 if name == "sign" else float(rng.choice(SIGMAS))
            reduction = str(rng.choice(["sum", "mean"] if dynamic else ["sum", "none", "mean"]))
            # Huber's gradient is delta times SmoothL1's with beta = delta
            attrs: dict[str, object] = {"sigma": sigma, "reduction": reduction,
                                        "scale": sigma if name == "huber" else 1.0}
            out.append(Spelling("sl1", name, SL1_BODIES[name], attrs, dtype, dynamic, {"dout": None},
                                {"dout": float(rng.choice([1.0, 0.75, -1.5]))}, opset=opset))
        else:
            name = str(rng.choice(list(PROX_BODIES)))
            runtime = bool(rng.random() < 0.6)
            alpha = float(rng.choice([0.5, 0.125, 0.25])) if dtype == F16 else float(rng.choice([0.5, 0.125, 2.0]))
            l1, l2 = float(rng.choice([0.25, 0.5, 1.0])), float(rng.choice([0.0, 0.25, 0.5]))
            values = {"alpha": alpha, "l1": l1, "l2": l2}
            scalars: dict[str, float | None] = {s: (None if runtime else v) for s, v in values.items()}
            out.append(Spelling("prox", name, PROX_BODIES[name], {"scalar_form": "raw"}, dtype, dynamic, scalars,
                                values, scalar_shape=() if rng.random() < 0.5 else (1,), opset=opset))
    return out


def huber_spelling(delta: float = 1.0, dtype: int = F32) -> Spelling:
    return Spelling("sl1", "huber", sl1_huber, {"sigma": delta, "reduction": "sum", "scale": delta}, dtype,
                    scalars={"dout": None}, draws={"dout": 1.0})


# -- points a mutation proposes ----------------------------------------------------------------

def _rep(sp: Spelling, v: float) -> float:
    """v as the graph's dtype holds it."""
    with np.errstate(over="ignore"):
        return float(np.asarray(v).astype(NP[sp.dtype]))


def at_x(sp: Spelling, x: float, label: float = 0.0, **scalars: float) -> Point:
    """A point where the difference (predict - label, or var - alpha*delta) is x, in the graph's
    dtype, with dout 1 (not every multiple of it is exact) unless given."""
    if sp.family == "sl1" and "dout" in sp.runtime_scalars():
        scalars.setdefault("dout", 1.0)
    return sp.at_x(_rep(sp, x), _rep(sp, label), **scalars)


def at_out(sp: Spelling, v: float) -> Point:
    """A point where the contract's result is about v (outside the linear piece, or beyond the
    threshold), for mutations of the output."""
    if sp.family == "sl1":
        k = sp.kink()
        scale = float(sp.attrs["scale"]) * sp.norm({})  # type: ignore[arg-type]
        return at_x(sp, -(3 * k + 1) if v < 0 else 3 * k + 1, dout=_rep(sp, abs(v) / scale))
    alpha = sp.scalar_value("alpha", {})
    t = alpha * sp.scalar_value("l1", {})
    k = 1 + alpha * sp.scalar_value("l2", {})
    return at_x(sp, math.copysign(abs(v) * k + t, v))


def grid(sp: Spelling) -> list[Point]:
    """Finite points over every piece, near the kinks but not on them."""
    k = sp.kink()
    xs = [0.37 * k, -0.61 * k, 0.93 * k, -1.08 * k, 1.7 * k + 0.3, -3.1 * k - 1.0, 11.5 * k + 5, 0.004 * k]
    out = [at_x(sp, x) for x in xs]
    if sp.family == "sl1" and "dout" in sp.runtime_scalars():
        out += [at_x(sp, x, dout=-2.5) for x in xs[:6]]
    if sp.family == "prox":
        out += [{"var": _rep(sp, x), "delta": _rep(sp, d)} for x in (0.3, -2.0, 5.0) for d in (1.0, -1.5)]
    return out


def _x_points(sp: Spelling, values: Sequence[float]) -> list[Point]:
    return [at_x(sp, s * v) for v in values for s in (1.0, -1.0)]


def _site_points(sp: Spelling, role: str, values: Sequence[float]) -> list[Point]:
    if role == "out":
        return [at_out(sp, s * v) for v in values for s in (1.0, -1.0)]
    return _x_points(sp, values)


def _pick(rng: np.random.Generator, items: Sequence[Any]) -> Any:
    return items[int(rng.integers(0, len(items)))]


# -- mutation operators --------------------------------------------------------------------------

Operator = Callable[[Spelling, list[Site], np.random.Generator], Mutation | None]


def perturb_constant(sp: Spelling, sites: list[Site], rng: np.random.Generator) -> Mutation | None:
    """One constant of the spelling changed (the others that share its value kept)."""
    consts = [s for s in sites if s.kind == "const" and s.info[0] != 0]
    if not consts:
        return None
    site = _pick(rng, consts)
    c = float(site.info[0])
    factor = float(_pick(rng, [1.5, 0.75, 1 + 2.0**-6, 1 - 2.0**-5, -1.0, 4.0]))
    new = _rep(sp, c * factor)
    k = sp.kink()
    values = [abs(c), abs(new), (abs(c) + abs(new)) / 2, abs(c) * k, abs(new) * k, (abs(c) + abs(new)) * k / 2]
    return Mutation("perturb-constant", f"constant {site.role} {c:.9g} -> {new:.9g}", site, lambda _: new,
                    "differs", _x_points(sp, values) + grid(sp))


def _mirror(op: str) -> str:
    return {"Less": "Greater", "Greater": "Less", "LessOrEqual": "GreaterOrEqual", "GreaterOrEqual": "LessOrEqual"}[op]


def _strictness(op: str) -> str:
    return {"Less": "LessOrEqual", "LessOrEqual": "Less", "Greater": "GreaterOrEqual", "GreaterOrEqual": "Greater"}[op]


def compare_op(sp: Spelling, sites: list[Site], rng: np.random.Generator) -> Mutation | None:
    """A comparison made strict or loose (equal where both branches agree at the tie), its operands
    swapped with the mirrored operator (equal), written as Not of the opposite (equal), or turned
    the other way (differs)."""
    compares = [s for s in sites if s.kind == "compare"]
    if not compares:
        return None
    site = _pick(rng, compares)
    op, tie_agrees = site.info
    how = _pick(rng, ["strictness", "mirror", "not-opposite", "reverse"])
    k = sp.kink()
    ties = _x_points(sp, [k])
    if how == "strictness":
        new = _strictness(op)
        return Mutation("compare", f"{site.role}: {op} -> {new}", site, lambda b, _, x, y: b.op(new, x, y),
                        "equal" if tie_agrees else "differs", ties)
    if how == "mirror":
        return Mutation("compare", f"{site.role}: {op}(a, b) -> {_mirror(op)}(b, a)", site,
                        lambda b, _, x, y: b.op(_mirror(op), y, x), "equal")
    if how == "not-opposite":
        opposite = _mirror(_strictness(op))
        # NaN makes both comparisons false, so Not flips it: equal, or a difference at NaN only
        return Mutation("compare", f"{site.role}: {op}(a, b) -> Not({opposite}(a, b))", site,
                        lambda b, _, x, y: b.op("Not", b.op(opposite, x, y)), "nonfinite")
    return Mutation("compare", f"{site.role}: {op} -> {_mirror(op)}", site, lambda b, _, x, y: b.op(_mirror(op), x, y),
                    "differs", ties + grid(sp))


def _out_site(sites: list[Site]) -> Site:
    return next(s for s in sites if s.kind == "value" and s.role == "out")


def _diff_role(sp: Spelling) -> str:
    return "x" if sp.family == "sl1" else "p"


def band(sp: Spelling, sites: list[Site], rng: np.random.Generator) -> Mutation | None:
    """The result scaled by 1.5 inside a band of the difference at a computed point
    (lo < k*|x| < hi: the band's edges lo/k and hi/k are constants of no node), wide, narrow or a
    few ulps wide."""
    kink = sp.kink()
    lo_edge = 0.1 * kink if sp.family == "sl1" else 1.2 * kink + 0.1
    center = _rep(sp, float(rng.uniform(lo_edge, lo_edge + 3 * kink + 1)))
    k = float(_pick(rng, [3.0, 7.0, 0.625]))
    width = float(_pick(rng, [0.25, 1e-3, 2.0**-9 if sp.dtype == F16 else 2.0**-20]))
    lo, hi = _rep(sp, k * center * (1 - width)), _rep(sp, k * center * (1 + width))
    role = _diff_role(sp)

    def apply(b: Builder, y: str) -> str:
        scaled = b.op("Mul", b.op("Abs", b.values[role]), b.lit(k))
        inside = b.op("And", b.op("Greater", scaled, b.lit(lo)), b.op("Less", scaled, b.lit(hi)))
        return b.op("Where", inside, b.op("Mul", y, b.lit(1.5)), y)

    return Mutation("band", f"result * 1.5 where {lo:.9g} < {k:g}*|{role}| < {hi:.9g}", _out_site(sites), apply,
                    "differs", _x_points(sp, [center]))


def cap_scalar(sp: Spelling, sites: list[Site], rng: np.random.Generator) -> Mutation | None:
    """One use of a runtime scalar capped: min(s, cap) (dout in one branch; alpha in one of its
    uses), with the cap inside the op's domain, so the proof's domain does not excuse it."""
    uses = [s for s in sites if s.kind == "scalar" and s.info[1]]
    names = [n for n in {s.role for s in uses} if sum(s.role == n for s in uses) >= 2]
    if not names:
        return None
    name = _pick(rng, sorted(names))
    site = _pick(rng, [s for s in uses if s.role == name])
    if name == "dout":
        cap = float(_pick(rng, [8.0, 0.5, 2.0]))
        above = [cap * 2 + 1, cap * 8]
    elif sp.dtype == F16 and name == "alpha":
        cap = float(_pick(rng, [0.5, 0.25]))
        above = [(cap + 1) / 2, 1.0]
    else:
        cap = float(_pick(rng, [5.0, 3.0, 1.5]))
        above = [cap * 1.5, cap * 4]
    points = [{**p, name: _rep(sp, a)} for a in above for p in grid(sp)]
    return Mutation("cap-scalar", f"use {site.index} of {name}: min({name}, {cap:g})", site,
                    lambda b, ref: b.op("Min", ref, b.lit(cap)), "differs", points)


def times_one_except_on_a_set(sp: Spelling, sites: list[Site], rng: np.random.Generator) -> Mutation | None:
    """The result times an expression that is 1 except on a set: a point of the difference, the
    antipodes predict == -label (var == -delta), x/x (not 1 at 0); or exactly 1 everywhere it
    matters: |sign(x)| (the result is 0 where it is not), sign(|x| + 1), the constant 1."""
    role = _diff_role(sp)
    a, b_in = sp.tensors
    kink = sp.kink()
    v = _rep(sp, float(rng.uniform(1.2, 3.0)) * kink + 0.25)
    how = _pick(rng, ["point", "antipodes", "x-over-x", "abs-sign", "sign-plus-one", "one"])
    if how == "point":
        def apply(b: Builder, y: str) -> str:
            return b.op("Mul", y, b.op("Where", b.op("Equal", b.values[role], b.lit(v)), b.lit(2.0), b.lit(1.0)))
        return Mutation("one-except-on-a-set", f"result * (2 if {role} == {v:.9g} else 1)", _out_site(sites), apply,
                        "differs", [at_x(sp, v)])
    if how == "antipodes":
        def apply(b: Builder, y: str) -> str:
            return b.op("Mul", y, b.op("Where", b.op("Equal", a, b.op("Neg", b_in)), b.lit(2.0), b.lit(1.0)))
        return Mutation("one-except-on-a-set", f"result * (2 if {a} == -{b_in} else 1)", _out_site(sites), apply,
                        "differs", [{a: v, b_in: -v}, {a: -v, b_in: v}, {a: 3 * v, b_in: -3 * v}])
    if how == "x-over-x":
        def apply(b: Builder, y: str) -> str:
            return b.op("Mul", y, b.op("Div", b.values[role], b.values[role]))
        return Mutation("one-except-on-a-set", f"result * ({role}/{role})", _out_site(sites), apply, "differs",
                        [at_x(sp, 0.0)])
    factor: Callable[[Builder], str] = {
        "abs-sign": lambda b: b.op("Abs", b.op("Sign", b.values[role])),
        "sign-plus-one": lambda b: b.op("Sign", b.op("Add", b.op("Abs", b.values[role]), b.lit(1.0))),
        "one": lambda b: b.lit(1.0),
    }[how]
    text = {"abs-sign": f"|sign({role})|", "sign-plus-one": f"sign(|{role}| + 1)", "one": "1"}[how]
    return Mutation("one-except-on-a-set", f"result * {text}", _out_site(sites),
                    lambda b, y: b.op("Mul", y, factor(b)), "equal")


def narrow_roundtrip(sp: Spelling, sites: list[Site], rng: np.random.Generator) -> Mutation | None:
    """A value round-tripped through float16 or bfloat16 inside the region: equal when the value is
    that type already, else it rounds (and flushes tiny values, overflows large ones)."""
    role = str(_pick(rng, [_diff_role(sp), "out"]))
    site = next(s for s in sites if s.kind == "value" and s.role == role)
    target = int(_pick(rng, [F16, BF16]))
    bits = 11 if target == F16 else 8
    k = sp.kink()
    values = [r * (1 + 2.0**-bits) for r in (0.5 * k, 1.0, 2.0, 0.25 * k)] + \
        [r * (1 + 3 * 2.0**-(bits + 1)) for r in (0.5 * k, 1.0)] + [2.0**-26, 1e5, 3e38]
    if sp.family == "prox" and role == "p":
        values = [v + k for v in values[:6]] + values[6:]
    intent = "equal" if sp.dtype == F16 and target == F16 else "differs"
    name = "float16" if target == F16 else "bfloat16"
    return Mutation("narrow-roundtrip", f"{role} through {name} and back", site,
                    lambda b, v: b.op("Cast", b.op("Cast", v, to=target), to=sp.dtype), intent,
                    _site_points(sp, role, values))


def add_remove(sp: Spelling, sites: list[Site], rng: np.random.Generator) -> Mutation | None:
    """(v + C) - C: equal over the reals, all of v's small digits lost in the graph's type."""
    role = str(_pick(rng, [_diff_role(sp), "out"]))
    site = next(s for s in sites if s.kind == "value" and s.role == role)
    c = float(_pick(rng, [2.0**24, 1.0, 2.0**12] if sp.dtype == F32 else [2.0**11, 1.0, 64.0]))
    k = sp.kink()
    values = [0.3 * k, 0.3, 1e-5 * c, 2.3 * k + 0.7, k + 0.3 * (1 + k)] if sp.family == "prox" or role == "out" \
        else [0.3 * k, 0.7 * k, 1e-3 * k, 2.3 * k + 0.7]
    return Mutation("add-remove", f"({role} + {c:.9g}) - {c:.9g}", site,
                    lambda b, v: b.op("Sub", b.op("Add", v, b.lit(c)), b.lit(c)), "differs",
                    _site_points(sp, role, values))


def overflow(sp: Spelling, sites: list[Site], rng: np.random.Generator) -> Mutation | None:
    """An intermediate that overflows: the result scaled up and down by a large constant (by 2:
    only near the range, equal), or times (x*x + 1)/(x*x + 1), inf/inf = NaN where x*x overflows."""
    role = _diff_role(sp)
    how = _pick(rng, ["scale-big", "scale-2", "square"])
    out = _out_site(sites)
    if how == "scale-2":
        return Mutation("overflow", "(result * 2) / 2", out,
                        lambda b, y: b.op("Div", b.op("Mul", y, b.lit(2.0)), b.lit(2.0)), "equal")
    if how == "scale-big":
        big = 2.0**100 if sp.dtype == F32 else 2.0**10
        values = [2.0**30, 1e9, 1e12] if sp.dtype == F32 else [100.0, 500.0]
        return Mutation("overflow", f"(result * {big:.9g}) / {big:.9g}", out,
                        lambda b, y: b.op("Div", b.op("Mul", y, b.lit(big)), b.lit(big)), "differs",
                        _site_points(sp, "out", values))

    def apply(b: Builder, y: str) -> str:
        sq = b.op("Add", b.op("Mul", b.values[role], b.values[role]), b.lit(1.0))
        return b.op("Mul", y, b.op("Div", sq, sq))

    values = [1e20, 3e25] if sp.dtype == F32 else [300.0, 900.0]
    return Mutation("overflow", f"result * ({role}*{role} + 1)/({role}*{role} + 1)", out, apply, "differs",
                    _x_points(sp, values))


def nonfinite(sp: Spelling, sites: list[Site], rng: np.random.Generator) -> Mutation | None:
    """Changes at +-inf or NaN only, inside the region: the difference made 0 where it is NaN (for
    the update, the op's nan_to_zero variant: equal) or where it is +-inf; or the result plus 0*x,
    the op's blend variant (equal)."""
    role = _diff_role(sp)
    a, b_in = sp.tensors
    how = _pick(rng, ["nan-to-zero", "inf-to-zero", "blend"])
    diff = next(s for s in sites if s.kind == "value" and s.role == role)
    if how == "blend":
        return Mutation("nonfinite", f"result + 0*{role}", _out_site(sites),
                        lambda b, y: b.op("Add", y, b.op("Mul", b.values[role], b.lit(0.0))), "nonfinite")
    if how == "nan-to-zero":
        return Mutation("nonfinite", f"{role} made 0 where it is NaN", diff,
                        lambda b, v: b.op("Where", b.op("Equal", v, v), v, b.lit(0.0)), "nonfinite",
                        [{a: math.nan, b_in: 0.5}, {a: 0.5, b_in: math.nan}])
    return Mutation("nonfinite", f"{role} made 0 where it is +-inf", diff,
                    lambda b, v: b.op("Where", b.op("Equal", b.op("Abs", v), b.lit(math.inf)), b.lit(0.0), v),
                    "nonfinite", [{a: s, b_in: 0.5} for s in (math.inf, -math.inf)] +
                    [{a: 0.5, b_in: s} for s in (math.inf, -math.inf)])


def element_count(sp: Spelling, sites: list[Site], rng: np.random.Generator) -> Mutation | None:
    """The mean's element count n replaced by (n + 1 if n == 48 else n): equal for a static count
    other than 48, different for a dynamic one."""
    counts = [s for s in sites if s.kind == "value" and s.role == "numel"]
    if not counts:
        return None
    site = _pick(rng, counts)

    def apply(b: Builder, n: str) -> str:
        return b.op("Where", b.op("Equal", n, b.lit(48.0)), b.op("Add", n, b.lit(1.0)), n)

    points = [{**p, "numel": 48} for p in grid(sp)]
    return Mutation("element-count", f"count {site.index}: n + 1 if n == 48", site, apply,
                    "differs" if sp.dynamic else "equal", points)


def beyond_difference(sp: Spelling, sites: list[Site], rng: np.random.Generator) -> Mutation | None:
    """The result doubled where the label is in a band far from 0 (999 < label < 1001), or where
    var and delta are both large: the contract depends on the difference alone."""
    out = _out_site(sites)
    k = sp.kink()
    if sp.family == "sl1":
        lo, hi = (999.0, 1001.0)

        def apply(b: Builder, y: str) -> str:
            band_ = b.op("And", b.op("Greater", "label", b.lit(lo)), b.op("Less", "label", b.lit(hi)))
            return b.op("Where", band_, b.op("Mul", y, b.lit(2.0)), y)

        return Mutation("beyond-difference", f"result * 2 where {lo:g} < label < {hi:g}", out, apply, "differs",
                        [at_x(sp, x, label=1000.0) for x in (0.37 * k, 1.7 * k + 0.3, -2.5 * k - 1)])
    big = 1e6 if sp.dtype == F32 else 100.0

    def apply_p(b: Builder, y: str) -> str:
        both = b.op("And", b.op("Greater", b.op("Abs", "var"), b.lit(big)), b.op("Greater", b.op("Abs", "delta"),
                                                                              b.lit(big)))
        return b.op("Where", both, b.op("Mul", y, b.lit(2.0)), y)

    points = [{"var": _rep(sp, v * big), "delta": _rep(sp, d * big)} for v, d in ((2.0, 3.0), (-3.0, 2.0), (2.0, -1.5))]
    return Mutation("beyond-difference", f"result * 2 where |var| > {big:g} and |delta| > {big:g}", out, apply_p,
                    "differs", points)


def equal_rewrite(sp: Spelling, sites: list[Site], rng: np.random.Generator) -> Mutation | None:
    """Rewrites equal by construction: operands of a commutative op swapped, x / c as x * (1/c)
    (exact for a power of two, the rounded reciprocal otherwise), -(-x), x clamped to the float
    range."""
    options = ["neg-neg", "clamp-range"] + (["commute"] if any(s.kind == "comm" for s in sites) else []) + \
        (["div-as-mul"] if any(s.kind == "div" for s in sites) else [])
    how = _pick(rng, options)
    role = _diff_role(sp)
    diff = next(s for s in sites if s.kind == "value" and s.role == role)
    if how == "commute":
        site = _pick(rng, [s for s in sites if s.kind == "comm"])
        return Mutation("equal-rewrite", f"{site.role} #{site.index}: operands swapped", site, None, "equal")
    if how == "div-as-mul":
        site = _pick(rng, [s for s in sites if s.kind == "div"])
        return Mutation("equal-rewrite", f"/ {site.info[0]:.9g} as * (1/{site.info[0]:.9g})", site,
                        lambda b, v, d: b.op("Mul", v, b.lit(1.0 / d)), "equal")
    if how == "neg-neg":
        return Mutation("equal-rewrite", f"-(-{role})", diff, lambda b, v: b.op("Neg", b.op("Neg", v)), "equal")
    top = FLOAT_MAX[sp.dtype]
    # sign(x) is all SmoothL1 reads of a large x; the update returns p itself, +-inf included
    return Mutation("equal-rewrite", f"{role} clamped to +-{top:.9g}", diff,
                    lambda b, v: b.op("Min", b.op("Max", v, b.lit(-top)), b.lit(top)),
                    "equal" if sp.family == "sl1" else "nonfinite")


OPERATORS: dict[str, Operator] = {
    "perturb-constant": perturb_constant,
    "compare": compare_op,
    "band": band,
    "cap-scalar": cap_scalar,
    "one-except-on-a-set": times_one_except_on_a_set,
    "narrow-roundtrip": narrow_roundtrip,
    "add-remove": add_remove,
    "overflow": overflow,
    "nonfinite": nonfinite,
    "element-count": element_count,
    "beyond-difference": beyond_difference,
    "equal-rewrite": equal_rewrite,
}


def generate(seed: int, budget: int, spelling_count: int = 24) -> list[Case]:
    """`budget` mutants of random spellings, each classified by onnxruntime (`classify`); every
    spelling itself too, unmutated (it must be equal, and fuse)."""
    rng = np.random.default_rng(seed)
    pool = spellings(rng, spelling_count)
    bases = {id(sp): Runner(sp.build()[0]) for sp in pool}
    owns = {id(sp): own_variant(sp, bases[id(sp)]) for sp in pool}
    cases = [classify(sp, None, bases[id(sp)], owns[id(sp)]) for sp in pool]
    names = list(OPERATORS)
    k = 0
    while len(cases) < budget + len(pool) and k < 20 * budget:
        k += 1
        sp = pool[int(rng.integers(0, len(pool)))]
        operator = OPERATORS[names[k % len(names)]]
        mutation = operator(sp, sp.build()[1].sites, rng)
        if mutation is None:
            continue
        cases.append(classify(sp, mutation, bases[id(sp)], owns[id(sp)]))
    return cases


# -- what the pass did with a mutant ---------------------------------------------------------------

@dataclass
class Outcome:
    fused: bool  # a fusion covers the mutated region's output
    partial: bool  # something else fused (a mutation around the result leaves the region inside it)
    wrong: str  # "wrongly fused" | "wrongly refused" | ""
    reasons: list[str]
    seconds: float
    assumed_finite: bool = False
    reinterpreted: bool = False  # fused as another instance of the op that computes the mutant


def judge(case: Case, assume_finite: bool = False, patterns: Sequence[Any] | None = None) -> Outcome:
    """Runs the pass on the mutant. A fusion of the graph's output is wrong when the fused node,
    on its own inputs and attributes, differs from the unfused mutant at the witness (a mutant
    that is another instance of the op, e.g. with a capped scalar as its input, may fuse)."""
    import time

    from lowering.patterns import DEFAULT_PATTERNS
    from lowering.rewrite import fuse_proto

    start = time.perf_counter()
    fused, report = fuse_proto(case.model, DEFAULT_PATTERNS if patterns is None else patterns,
                               assume_finite=assume_finite)
    seconds = time.perf_counter() - start
    covering = [f for f in report.fusions if f.output == OUT]
    reasons = [r.reason for r in report.rejections]
    if not covering:
        partial = bool(report.fusions)
        refused_equal = case.kind == "equal" and not partial
        wrong = "wrongly refused" if refused_equal or (case.kind == "nonfinite" and assume_finite) else ""
        return Outcome(False, partial, wrong, reasons, seconds)
    finite_only = covering[0].assumed_finite
    if case.kind in ("differs", "nonfinite") and case.witness is not None:
        if case.kind == "nonfinite" and assume_finite:
            return Outcome(True, False, "" if finite_only else "wrongly fused", reasons, seconds, finite_only)
        agrees = fused_node_agrees(case, fused, case.witness)
        return Outcome(True, False, "" if agrees else "wrongly fused", reasons, seconds, finite_only, agrees)
    return Outcome(True, False, "", reasons, seconds, finite_only)


def fused_node_agrees(case: Case, fused: onnx.ModelProto, point: Point) -> bool:
    """Whether the fused node that writes the graph output gives, at `point`, what the unfused
    mutant gives (its float64 reference on the values it reads, to the precision standard)."""
    from contracts.fused_ops import DOMAIN

    sp = case.spelling
    node = next(n for n in fused.graph.node if n.domain == DOMAIN and n.output[0] == OUT)
    feeds = sp.feeds(point)
    probe = onnx.ModelProto()
    probe.CopyFrom(fused)
    inits = {t.name: numpy_helper.to_array(t) for t in fused.graph.initializer}
    computed = [n for n in node.input if n and n not in feeds and n not in inits]
    del probe.graph.output[:]
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in computed + [OUT])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    session = ort.InferenceSession(probe.SerializeToString(), so, providers=["CPUExecutionProvider"])
    values = dict(zip(computed + [OUT], session.run(None, feeds)))
    spec = OP_SPECS[node.op_type]
    args = {formal: np.asarray(values.get(n, feeds.get(n, inits.get(n))), np.float64)
            for formal, n in zip(spec.inputs, node.input)}
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
    with np.errstate(all="ignore"):
        golden = spec.golden(args, attrs)[0]
    mutant = Runner(case.model)(feeds)
    return not differs(mutant, golden)
