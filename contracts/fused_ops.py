"""The contract of the fused nodes: what the graph pass emits and what codegen/runtime implement.

Every later stage (kernel lowering, the CPU backend, the diff) reads the fused node through this
module only, so the meaning of each input and attribute is defined once, here, together with a
float64 numpy reference that tests and the diff use as the golden.

SmoothL1LossGradV2(predict, label, dout) -> gradient
    attrs: sigma (float >= 0, PyTorch's beta), reduction ("none" | "mean" | "sum"),
           scale (float, default 1.0: a constant factor the graph applied on top, e.g. Huber's delta)
    x = predict - label
    s = x / sigma            where |x| < sigma
        sign(x)              elsewhere (sign(+-0) = 0); NaN in x gives NaN
    gradient = scale * norm * dout * s,  norm = 1/numel(predict) for "mean", else 1
    nonfinite ("select" | "blend" | "blend_dout", default "select"): how +-inf inputs behave.
           select: as above (a Where picks a branch and never reads the other); blend: an
           arithmetic select (mask * branch + (1 - mask) * branch) of x / sigma and sign(x),
           then times dout: NaN where x / sigma is +-inf; blend_dout: the same select of
           the branches times dout and norm * scale: NaN also where dout is +-inf or NaN
    predict and label have one shape; dout has that shape or exactly one element.

ApplyProximalGradientDescent(var, alpha, l1, l2, delta) -> var_out
    attrs: scalar_form ("raw" | "folded" | "folded_reciprocal")
      raw:               threshold = alpha * l1, divisor = 1 + alpha * l2
      folded:            threshold = l1,         divisor = l2
      folded_reciprocal: threshold = l1,         divisor = 1 / l2
           shrink_max (float, default +inf): ONNX Clip(x, min=0) without max clamps at the
           largest finite value of its dtype, so a graph written with it maps +-inf to
           +-that value; the attribute carries it
    prox = var - alpha * delta
    var_out = sign(prox) * min(max(|prox| - threshold, 0), shrink_max) / divisor
              (sign(0) = 0; NaN propagates)
    nonfinite ("select" | "blend" | "nan_to_zero", default "select"): blend gives NaN where
           prox is +-inf (an arithmetic select); nan_to_zero gives 0 where prox is NaN (a
           where-chain whose comparisons are all false there, ONNX Shrink)
    alpha, l1, l2 hold one element each (0-D or [1]); var and delta share one shape.

Tensors are float32, float16 or bfloat16 (one dtype per node for the tensor inputs; the scalars of
ApplyProximalGradientDescent are that dtype or float32). Compute is float32 with one rounding to
the output dtype (round to nearest even).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from .errors import InternalError

DOMAIN = "com.huawei.ascend"
DOMAIN_VERSION = 1

SMOOTH_L1_GRAD = "SmoothL1LossGradV2"
PROXIMAL_GD = "ApplyProximalGradientDescent"

REDUCTIONS = ("none", "mean", "sum")
SCALAR_FORMS = ("raw", "folded", "folded_reciprocal")
SMOOTH_L1_NONFINITE = ("select", "blend", "blend_dout")
PROXIMAL_NONFINITE = ("select", "blend", "nan_to_zero")


@dataclass(frozen=True)
class AttrSpec:
    """One attribute of a fused op: its default and what values it admits."""

    name: str
    default: float | str
    choices: tuple[str, ...] = ()  # for a string attribute: its allowed values
    minimum: float | None = None  # for a float attribute: its least allowed value

    def check(self, value: object) -> float | str:
        """`value` as the attribute's type; ValueError naming the attribute when it is not allowed."""
        if isinstance(self.default, str):
            text = value.decode(errors="backslashreplace") if isinstance(value, bytes) else value
            if not isinstance(text, str) or (self.choices and text not in self.choices):
                raise ValueError(f"{self.name} {text!r} not in {self.choices}")
            return text
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
            raise ValueError(f"{self.name} must be a number, got {value!r}")
        number = float(value)
        if self.minimum is not None and not number >= self.minimum:
            raise ValueError(f"{self.name} must be >= {self.minimum:g}, got {number!r}")
        return number


Reference = Callable[[Mapping[str, np.ndarray], Mapping[str, object]], tuple[np.ndarray, ...]]


@dataclass(frozen=True)
class OpSpec:
    """Everything the stages after matching know of one fused op type: the registry entry.

    `reference` is the float64 golden (inputs and attributes by contract name -> one array per
    output); `formula` the text the emitted README shows; `example_scalars` values of the scalar
    inputs fit for an example program and `scalar_draws` how generated inputs draw them; `kinks`,
    given the attributes and the scalar inputs' values, where the function changes piece (edge
    values that generated inputs hit exactly).
    """

    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    scalar_inputs: tuple[str, ...]
    attr_specs: tuple[AttrSpec, ...]
    reference: Reference
    formula: str
    example_scalars: Mapping[str, float] = field(default_factory=dict)
    scalar_draws: Mapping[str, ScalarDraw] = field(default_factory=dict)
    kinks: Callable[[Mapping[str, object], Mapping[str, float]], tuple[Kink, ...]] = field(
        default=lambda attrs, scalars: ())
    proof: ProofSpec | None = None

    @property
    def attrs(self) -> dict[str, object]:
        """Attribute name -> default value."""
        return {a.name: a.default for a in self.attr_specs}

    def check_attrs(self, given: Mapping[str, object]) -> dict[str, object]:
        """Every attribute with defaults filled in and values checked; ValueError otherwise."""
        known = {a.name: a for a in self.attr_specs}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise ValueError(f"unknown attribute {unknown[0]!r}")
        return {name: spec.check(given[name]) if name in given else spec.default for name, spec in known.items()}

    def golden(self, inputs: Mapping[str, np.ndarray], attrs: Mapping[str, object]) -> tuple[np.ndarray, ...]:
        """The float64 reference with attributes checked and defaulted."""
        return self.reference(inputs, self.check_attrs(attrs))


@dataclass(frozen=True)
class ProofSpec:
    """The op as a formula a proof compares a region with (lowering.proof).

    `contract(m, inputs, params, attrs)` builds the output from the inputs (extended-real values,
    by contract name) with the semantics `m` (lowering.proof.semantics.Semantics), so one text
    serves exact evaluation and the solver. `params` are the real numbers the kernel derives from
    the attributes (sigma and 1/sigma, ...) plus `norm` (1/numel(first input) for reduction mean,
    else 1), given exactly as the region holds them; `derive(attrs, at, snap, big, known)` finds
    them: `at` evaluates the region exactly at inputs given by name (divided by norm there; inputs
    that are constants keep their values, which `known` gives by name), `snap` replaces
    an attribute's float by the region constant (or product or quotient of two) it rounds, `big` is
    beyond every constant. `kernel(attrs)` are the same parameters as the kernel computes them from
    the attributes: each derived one must equal its kernel twin up to the rounding of a float32
    attribute.
    `domain(m, inputs, attrs, dtype)` is what the op assumes of its runtime scalar inputs, and `finite`
    names the inputs that must be finite numbers (a step size, a penalty).
    """

    contract: Callable[[Any, Mapping[str, Any], Mapping[str, Any], Mapping[str, object]], Any]
    derive: Callable[[Mapping[str, object], Callable[..., Fraction | None], Callable[[float], Fraction], Fraction,
                      Mapping[str, Fraction]], dict[str, Fraction]]
    kernel: Callable[[Mapping[str, object]], dict[str, Fraction]]
    domain: Callable[[Any, Mapping[str, Any], Mapping[str, object], int | None], Any] = field(
        default=lambda m, inputs, attrs, dtype: True)
    finite: tuple[str, ...] = ()
    domain_text: str = ""
    # (attribute, values): variants of the op that differ only at +-inf and NaN, tried in turn
    # when the region's non-finite behaviour is not the default's
    nonfinite: tuple[str, tuple[str, ...]] | None = None
    # the contract compares at a breakpoint where its two sides agree up to the rounding of its
    # constants: with params["inclusive"] it builds the other side (<= for <)
    ties: bool = False


@dataclass(frozen=True)
class Kink:
    """Input values at which the op changes piece: `first = s + o` with `second = s`, for every
    o in `offsets` and s in `seconds` (inputs by contract name). Generated test inputs plant them."""

    first: str
    second: str
    offsets: tuple[float, ...]
    seconds: tuple[float, ...] = (0.0,)


@dataclass(frozen=True)
class ScalarDraw:
    """How generated inputs draw a scalar input: one of `fixed` or uniform in [low, high)."""

    fixed: tuple[float, ...]
    low: float
    high: float


OP_SPECS: dict[str, OpSpec] = {}


def register(spec: OpSpec) -> OpSpec:
    """Adds a fused op type to the registry every later stage reads; returns it."""
    if spec.op_type in OP_SPECS and OP_SPECS[spec.op_type] is not spec:
        raise InternalError(f"{spec.op_type} is registered already")
    OP_SPECS[spec.op_type] = spec
    return spec


def unregister(op_type: str) -> None:
    """Removes an op type (a test's toy op) from the registry."""
    OP_SPECS.pop(op_type, None)


def _sign_keep_nan(x: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(x), x, np.sign(x))


def smooth_l1_grad_reference(
    predict: np.ndarray,
    label: np.ndarray,
    dout: np.ndarray,
    sigma: float,
    reduction: str,
    scale: float = 1.0,
    nonfinite: str = "select",
) -> np.ndarray:
    """float64 golden of SmoothL1LossGradV2 (result in float64; the caller rounds)."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if sigma < 0:
        raise ValueError("sigma must be >= 0")
    p = np.asarray(predict, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = p - np.asarray(label, np.float64)
        inside = np.abs(x) < sigma
        s = np.where(inside, x / (sigma if sigma > 0 else 1.0), _sign_keep_nan(x))
    norm = 1.0 / p.size if reduction == "mean" and p.size else 1.0
    d = np.asarray(dout, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        linear = x / (sigma if sigma > 0 else 1.0)
        if nonfinite == "blend":  # 0 * a branch is 0 where it is finite, NaN where it is not
            s = s + 0.0 * linear + 0.0 * np.sign(x)
        out = float(scale) * norm * d * s
        if nonfinite == "blend_dout":
            out = out + 0.0 * (float(scale) * norm * d * linear) + 0.0 * (float(scale) * norm * d * np.sign(x))
        return out


def proximal_scalars(alpha: float, l1: float, l2: float, scalar_form: str) -> tuple[float, float]:
    """(threshold, divisor) in float64 for the three scalar forms."""
    if scalar_form == "raw":
        return alpha * l1, 1.0 + alpha * l2
    if scalar_form == "folded":
        return l1, l2
    if scalar_form == "folded_reciprocal":
        with np.errstate(divide="ignore"):
            return l1, float(np.float64(1.0) / np.float64(l2))
    raise ValueError(f"scalar_form must be one of {SCALAR_FORMS}, got {scalar_form!r}")


def proximal_gd_reference(
    var: np.ndarray,
    alpha: float | np.ndarray,  # a float, or a one-element array (a runtime scalar input)
    l1: float | np.ndarray,
    l2: float | np.ndarray,
    delta: np.ndarray,
    scalar_form: str = "raw",
    shrink_max: float = float("inf"),
    nonfinite: str = "select",
) -> np.ndarray:
    """float64 golden of ApplyProximalGradientDescent (result in float64; the caller rounds)."""
    a = float(np.asarray(alpha, np.float64).reshape(-1)[0])
    threshold, divisor = proximal_scalars(
        a,
        float(np.asarray(l1, np.float64).reshape(-1)[0]),
        float(np.asarray(l2, np.float64).reshape(-1)[0]),
        scalar_form,
    )
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        prox = np.asarray(var, np.float64) - a * np.asarray(delta, np.float64)
        shrunk = np.minimum(np.maximum(np.abs(prox) - threshold, 0.0), shrink_max)
        shrunk = np.where(np.isnan(prox), prox, shrunk)
        out = _sign_keep_nan(prox) * shrunk / divisor
        if nonfinite == "blend":
            out = out + 0.0 * prox
        elif nonfinite == "nan_to_zero":
            out = np.where(np.isnan(prox), 0.0, out)
        return out


def _smooth_l1_golden(x: Mapping[str, np.ndarray], a: Mapping[str, object]) -> tuple[np.ndarray, ...]:
    return (smooth_l1_grad_reference(x["predict"], x["label"], x["dout"], float(a["sigma"]),  # type: ignore[arg-type]
                                     str(a["reduction"]), float(a["scale"]),  # type: ignore[arg-type]
                                     str(a["nonfinite"])),)


def _proximal_golden(x: Mapping[str, np.ndarray], a: Mapping[str, object]) -> tuple[np.ndarray, ...]:
    return (proximal_gd_reference(x["var"], x["alpha"], x["l1"], x["l2"], x["delta"],
                                  str(a["scalar_form"]), float(a["shrink_max"]),  # type: ignore[arg-type]
                                  str(a["nonfinite"])),)


def _smooth_l1_kinks(a: Mapping[str, object], _: Mapping[str, float]) -> tuple[Kink, ...]:
    sigma = float(a["sigma"])  # type: ignore[arg-type]
    return (Kink("predict", "label", (sigma, -sigma), seconds=(0.0, 1.0, -3.0, 0.25)),)


def _proximal_kinks(a: Mapping[str, object], x: Mapping[str, float]) -> tuple[Kink, ...]:
    """|var - alpha*delta| = threshold, at delta = 0; and the zeros, where sign(prox) flips."""
    threshold, _ = proximal_scalars(x["alpha"], x["l1"], x["l2"], str(a["scalar_form"]))
    return (Kink("var", "delta", (threshold, -threshold, 0.0, -0.0)),)


def _smooth_l1_contract(m: Any, x: Mapping[str, Any], p: Mapping[str, Any], a: Mapping[str, object]) -> Any:
    """As the kernel's streamed-dout path computes it: (s * dout) * (scale * norm); a blend adds
    0 * each branch (NaN where the branch not taken is +-inf or NaN, as mask arithmetic gives)."""
    diff = m.sub(x["predict"], x["label"])
    factor = m.mul(p["scale"], p["norm"])
    sign = m.sign(diff)
    linear = m.mul(diff, p["inv_sigma"]) if "sigma" in p else diff
    inside = (m.le if p.get("inclusive") else m.lt)(m.abs(diff), p["sigma"]) if "sigma" in p else None
    s = m.where(inside, linear, sign) if "sigma" in p else sign
    zero = m.const(0)
    form = a["nonfinite"]
    if form == "blend_dout":
        lin, sgn = m.mul(m.mul(linear, x["dout"]), factor), m.mul(m.mul(sign, x["dout"]), factor)
        picked = m.where(inside, lin, sgn) if "sigma" in p else sgn
        return m.add(picked, m.add(m.mul(zero, lin), m.mul(zero, sgn)))
    if form == "blend":
        s = m.add(s, m.add(m.mul(zero, linear), m.mul(zero, sign)))
    return m.mul(m.mul(s, x["dout"]), factor)


def _smooth_l1_derive(a: Mapping[str, object], at: Callable[..., Fraction | None], snap: Callable[[float], Fraction],
                      big: Fraction, known: Mapping[str, Fraction]) -> dict[str, Fraction]:
    """scale from the plateau beyond sigma; sigma from the region's constants; 1/sigma from the
    slope at sigma / 2 (a region that multiplies by a rounded 1/beta holds that number)."""
    dout = known.get("dout", Fraction(1))
    plateau = at(predict=big, label=0, dout=1)
    out: dict[str, Fraction] = {}
    if plateau is None or plateau == 0 or dout == 0:
        return out
    plateau /= dout
    out["scale"] = plateau
    sigma = float(a["sigma"])  # type: ignore[arg-type]
    if sigma > 0:
        b = snap(sigma)
        inner = at(predict=b / 2, label=0, dout=1)
        if inner is not None and b > 0:
            out["sigma"] = b
            out["inv_sigma"] = inner / dout / (plateau * b / 2)
    return out


def _smooth_l1_kernel(a: Mapping[str, object]) -> dict[str, Fraction]:
    sigma = Fraction(float(a["sigma"]))  # type: ignore[arg-type]
    out = {"scale": Fraction(float(a["scale"]))}  # type: ignore[arg-type]
    if sigma > 0:
        out.update(sigma=sigma, inv_sigma=1 / sigma)
    return out


register(OpSpec(
    SMOOTH_L1_GRAD,
    inputs=("predict", "label", "dout"),
    outputs=("gradient",),
    scalar_inputs=(),
    attr_specs=(AttrSpec("sigma", 1.0, minimum=0.0), AttrSpec("reduction", "mean", choices=REDUCTIONS),
                AttrSpec("scale", 1.0), AttrSpec("nonfinite", "select", choices=SMOOTH_L1_NONFINITE)),
    reference=_smooth_l1_golden,
    formula=("x = predict - label\n"
             "s = x / sigma where |x| < sigma, else sign(x)   (sign(+-0) = 0; NaN in x gives NaN)\n"
             "gradient = scale * norm * dout * s,  norm = 1/numel(predict) for reduction mean, else 1\n"
             "nonfinite blend: s + 0 * (x / sigma) + 0 * sign(x); blend_dout: gradient + 0 * each branch's gradient"),
    example_scalars={"dout": 0.5},
    kinks=_smooth_l1_kinks,
    proof=ProofSpec(_smooth_l1_contract, _smooth_l1_derive, _smooth_l1_kernel,
                    nonfinite=("nonfinite", SMOOTH_L1_NONFINITE), ties=True),
))

def _proximal_contract(m: Any, x: Mapping[str, Any], p: Mapping[str, Any], a: Mapping[str, object]) -> Any:
    """As the kernel computes it: the threshold and 1 / divisor on the scalar unit, then one
    multiply (codegen.rules.proximal), so its overflows are the kernel's."""
    alpha, l1, l2 = x["alpha"], x["l1"], x["l2"]
    one = m.const(1)
    form = a["scalar_form"]
    if form == "raw":
        threshold, scale = m.mul(alpha, l1), m.div(one, m.add(one, m.mul(alpha, l2)))
    elif form == "folded":
        threshold, scale = l1, m.div(one, l2)
    else:
        threshold, scale = l1, l2
    prox = m.sub(x["var"], m.mul(x["delta"], alpha))
    shrunk = m.max(m.sub(m.abs(prox), threshold), m.const(0))
    if "shrink_max" in p:
        shrunk = m.min(shrunk, p["shrink_max"])
    out = m.mul(m.mul(m.sign(prox), shrunk), scale)
    if a["nonfinite"] == "blend":
        out = m.add(out, m.mul(m.const(0), prox))
    elif a["nonfinite"] == "nan_to_zero":
        out = m.where(m.isnan(prox), m.const(0), out)
    return out


def _proximal_derive(a: Mapping[str, object], at: Callable[..., Fraction | None], snap: Callable[[float], Fraction],
                     big: Fraction, known: Mapping[str, Fraction]) -> dict[str, Fraction]:
    cap = float(a["shrink_max"])  # type: ignore[arg-type]
    return {"shrink_max": Fraction(cap)} if cap != float("inf") else {}


_STEP_BOUND = 256  # how large a runtime step, threshold or divisor the proof admits


def _proximal_domain(m: Any, x: Mapping[str, Any], a: Mapping[str, object], dtype: int | None) -> Any:
    """A step and penalties as TensorFlow and CANN mean them (alpha, l1, l2 >= 0: the threshold
    is >= 0, the divisor >= 1) and of a size training uses (the threshold and the divisor at most
    256; alpha too, and at most 1 for float16 and bfloat16 tensors): beyond that a graph that
    computes alpha * delta in a half type overflows where the kernel, in float32, does not."""
    b = m.b
    zero, one, top = m.const(0), m.const(1), m.const(_STEP_BOUND)
    alpha, l1, l2 = x["alpha"], x["l1"], x["l2"]
    form = a["scalar_form"]
    half = dtype in (10, 16)  # TensorProto.FLOAT16, BFLOAT16
    step = b.and_(m.le(zero, alpha), m.le(alpha, one if half else top))
    if form == "raw":
        return b.and_(step, m.le(zero, l1), m.le(zero, l2), m.le(m.mul(alpha, l1), top), m.le(m.mul(alpha, l2), top))
    if form == "folded":
        return b.and_(step, m.le(zero, l1), m.le(l1, top), m.le(one, l2), m.le(l2, top))
    return b.and_(step, m.le(zero, l1), m.le(l1, top), m.le(m.div(one, top), l2), m.le(l2, one))


def _proximal_kernel(a: Mapping[str, object]) -> dict[str, Fraction]:
    cap = float(a["shrink_max"])  # type: ignore[arg-type]
    return {"shrink_max": Fraction(cap)} if cap != float("inf") else {}


register(OpSpec(
    PROXIMAL_GD,
    inputs=("var", "alpha", "l1", "l2", "delta"),
    outputs=("var_out",),
    scalar_inputs=("alpha", "l1", "l2"),
    attr_specs=(AttrSpec("scalar_form", "raw", choices=SCALAR_FORMS), AttrSpec("shrink_max", float("inf")),
                AttrSpec("nonfinite", "select", choices=PROXIMAL_NONFINITE)),
    reference=_proximal_golden,
    formula=("prox = var - alpha * delta\n"
             "var_out = sign(prox) * min(max(|prox| - threshold, 0), shrink_max) / divisor"
             "   (sign(0) = 0; NaN propagates)\n"
             "threshold, divisor = alpha*l1, 1 + alpha*l2 (raw) | l1, l2 (folded) | l1, 1/l2 (folded_reciprocal)\n"
             "nonfinite blend: + 0 * prox (NaN where prox is +-inf); nan_to_zero: 0 where prox is NaN"),
    example_scalars={"alpha": 0.01, "l1": 0.001, "l2": 0.01},
    # a positive step and non-negative penalties, with exact zeros now and then (l1 = 0 removes
    # the shrink, l2 = 0 the scaling)
    scalar_draws={"alpha": ScalarDraw((0.5, 0.125), 0.01, 1.0),
                  "l1": ScalarDraw((0.0, 0.25), 0.0, 0.5), "l2": ScalarDraw((0.0, 0.25), 0.0, 0.5)},
    kinks=_proximal_kinks,
    proof=ProofSpec(_proximal_contract, _proximal_derive, _proximal_kernel, _proximal_domain,
                    finite=("alpha", "l1", "l2"),
                    domain_text="alpha, l1, l2 >= 0 (threshold >= 0, divisor >= 1); threshold, divisor <= 256; "
                                "alpha <= 256 (<= 1 for float16 and bfloat16)",
                    nonfinite=("nonfinite", PROXIMAL_NONFINITE)),
))
