"""Values that are a constant multiple of a fused SmoothL1LossGradV2's output: a second fused node.

Autodiff writes both gradients of one loss from one cotangent: JAX's gradient with respect to
label is `-grad_p`, a Neg of the gradient with respect to predict. Once grad_p is fused, grad_t
reads the fused node, so the recogniser's regions (which stop at fused nodes) never see a
difference in it. This module looks at the elementwise values that read a fused output o and
nothing else but constants (forward_cone with no outside tensor), and proves by evaluation
(proof.check, probes from hypothesis.points: +-0, +-inf, NaN, the region's constants and random
points between them) that such a value y is k * o for one constant k = y(1). Every op the region
runs is piecewise rational in o with breakpoints only at its constants, so agreement on those
probes is the proof proof.py states.

Then y = k * SmoothL1LossGradV2(p, t, dout; sigma, reduction, scale), which is
SmoothL1LossGradV2(t, p, dout; sigma, reduction, |k| * scale) for k < 0: the function is odd in
x = p - t, and IEEE subtraction, |.|, division and sign are exactly odd (t - p == -(p - t)
bitwise), so for k = -1 the swap is exact but for the sign of a zero result; for k > 0 (or a label
the fused node broadcasts, which cannot become predict) the binding stays and the scale becomes
k * scale. The new node's function body is the first fusion's nodes followed by the multiple's,
reading predict and label by name: the graph's own computation of y from the bound inputs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...algebra import Algebra
from ...fused_ops import SMOOTH_L1_GRAD
from ...graph import FLOAT_TYPES, GraphIndex
from ..base import Match, NoMatch
from .evaluate import ELEMENTWISE, Unsupported
from .hypothesis import Counterexample, evaluate, magnitudes, narrowest, points
from .proof import Probe, check, fmt
from .region import Either, Region, RegionRefused, Walks, build, forward_cone

MAX_OUTPUTS = 6  # candidate values tried per fused output
# ONNX's elementwise math beyond what the recogniser evaluates: a multiple they read is a piece of
# a larger elementwise function of the gradient, which a second SmoothL1 kernel would only recompute
ELEMENTWISE_MATH = frozenset({
    "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "Pow", "Erf", "Sin", "Cos", "Tan", "Asin", "Acos",
    "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Softplus", "Softsign", "LeakyRelu", "Elu", "Selu", "Celu",
    "HardSigmoid", "HardSwish", "Gelu", "Mish", "ThresholdedRelu", "PRelu", "Floor", "Ceil", "Round", "IsNaN",
    "IsInf", "Mod", "Mean", "Equal"})


def recognise_multiples(alg: Algebra, fused: list[Match], skip: set[int], closed: Callable[[Match], Match],
                        rng: np.random.Generator) -> tuple[list[Match], list[tuple[int, str]]]:
    """Matches of values that are constant multiples of a fused SmoothL1 output (also of one this
    finds), each checked by `closed`; and (node, reason) for each fused output whose readers compute
    from it alone something that is not such a multiple."""
    found: list[Match] = []
    refused: list[tuple[int, str]] = []
    queue = [m for m in fused if m.op_type == SMOOTH_L1_GRAD]
    while queue:
        source = queue.pop(0)
        match, refusal = _multiple_of(alg, source, skip, closed, rng)
        if match is not None:
            found.append(match)
            alg.taken |= match.interior
            queue += [match, source]  # a multiple of the new node, and another of the same output
        elif refusal is not None:
            refused.append(refusal)
    return found, refused


def _multiple_of(alg: Algebra, source: Match, skip: set[int], closed: Callable[[Match], Match],
                 rng: np.random.Generator) -> tuple[Match | None, tuple[int, str] | None]:
    index = alg.index
    root = index.producer[source.output]
    walks = Walks(alg, Either(alg.taken, skip))
    best: tuple[int, str] | None = None
    tried = 0
    for out in forward_cone(walks, root, foreign=0):
        output = index.nodes[out].output[0]
        if out == root or index.elem_type(output) not in FLOAT_TYPES:
            continue
        tried += 1
        if tried > MAX_OUTPUTS:
            break
        try:
            found = _prove_multiple(index, walks, output, source, rng)
            if found is not None:
                return closed(found), None
        except (NoMatch, RegionRefused) as exc:
            if best is None:
                best = (out, str(exc))
        except Unsupported as exc:
            if best is None:
                best = (out, f"the region holds {exc}")
    return None, best


def _prove_multiple(index: GraphIndex, walks: Walks, output: str, source: Match,
                    rng: np.random.Generator) -> Match | None:
    """The match of `output` as k * the fused output, None when it is not a candidate (reads
    another runtime value, casts, more elementwise math reads it, or it is the fused output
    itself); Counterexample when it reads only the fused output but is no constant multiple of it."""
    region = build(walks, output, (source.output,))
    if region.scalars or region.others or index.elem_type(output) != source.dtype:
        return None  # reads another runtime value, or casts: some other function of it
    if not index.is_escaping(source.output, set(region.nodes)):
        return None  # the fused output has no other reader: a second node would only repeat it
    if any(index.nodes[c].op_type in ELEMENTWISE | ELEMENTWISE_MATH for c in index.consumers.get(output, ())):
        return None  # a piece of some larger elementwise function of the fused output
    k = _factor(index, region, source)

    def multiple(leaves: dict[str, np.ndarray], _: bool = False) -> np.ndarray:
        return k * leaves[source.output]

    verdict = check(index, region, _probes(region, source.output, rng), multiple, f"{fmt(k)} * {source.output}",
                    {source.output: source.output}, source.dtype, narrowest(index, region, source.dtype))
    if not verdict.holds:
        raise Counterexample(f"reads only the fused {source.output} but is not a constant multiple of it: "
                             f"{verdict.reason}")
    if k == 1.0:
        return None  # the value itself (an Identity, a * 1): nothing to fuse
    return _match(index, region, source, k, verdict.caveats)


def _factor(index: GraphIndex, region: Region, source: Match) -> float:
    """k = the region's value at o = 1: the only candidate for y = k * o."""
    k = float(np.asarray(evaluate(index, region, {source.output: np.ones(1)})).reshape(-1)[0])
    if not np.isfinite(k) or k == 0:
        raise Counterexample(f"reads only the fused {source.output} but is not a nonzero multiple of it: at "
                             f"{source.output}=1 the graph gives {fmt(k)}")
    return k


def _probes(region: Region, leaf: str, rng: np.random.Generator) -> list[Probe]:
    mags = magnitudes(region)
    return [Probe({**region.constants, leaf: points(rng, mags, mags, extra=3 * k)}) for k in range(3)]


def _match(index: GraphIndex, region: Region, source: Match, k: float, caveats: list[str]) -> Match:
    predict, label, dout = source.inputs
    given = source.attrs.get("scale", 1.0)
    scale = float(given) if isinstance(given, (int, float)) else 1.0
    swap = k < 0 and not source.expand
    inputs = [label, predict, dout] if swap else [predict, label, dout]
    new_scale = float(np.float32(abs(k) * scale if swap else k * scale))
    attrs = {**source.attrs, "scale": new_scale}
    allowed = set(region.nodes) | region.boundary | region.independent
    members = _needed(index, region.output, source.output, allowed)
    boundary = members & (region.boundary | region.independent)
    how = f"as {SMOOTH_L1_GRAD} with predict and label swapped" if swap else f"with scale {fmt(new_scale)}"
    note = f"computes {fmt(k)} * {source.output} (fused before) {how}"
    return Match("smooth_l1_grad/meaning-multiple", SMOOTH_L1_GRAD, region.output,
                 source.dtype, inputs, attrs, interior=members - boundary, boundary=boundary,
                 caveats=[note, *caveats], expand=dict(source.expand),
                 recomputes=source.interior | source.boundary | source.recomputes)


def _needed(index: GraphIndex, output: str, stop: str, allowed: set[int]) -> set[int]:
    needed: set[int] = set()
    stack = [output]
    while stack:
        value = stack.pop()
        i = index.producer.get(value)
        if value == stop or i is None or i in needed or i not in allowed:
            continue
        needed.add(i)
        stack.extend(v for v in index.nodes[i].input if v)
    return needed

