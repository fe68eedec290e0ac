"""Hypothesis ApplyProximalGradientDescent for a region around p = var - alpha * delta.

Binding: var is one side of the difference, delta the tensor the other side scales by scalars.
Attributes come from evaluation: with delta = 0 and a very large var V the result is (V - t) / k,
so two such points give the divisor k and the threshold t; with var = 0 and a large delta D it is
-(alpha D - t) / k, which gives alpha; +inf gives the cap of a Clip without max (shrink_max). The
runtime scalars are drawn twice, and each inferred quantity is bound to the runtime leaf that
held its value in both draws, or to a constant when it did not change: alpha; then the threshold
and divisor as they are (scalar_form "folded"), the divisor as a reciprocal ("folded_reciprocal"),
or t / alpha and (k - 1) / alpha ("raw"). Every runtime leaf must get a role.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from contracts.fused_ops import PROXIMAL_GD, proximal_gd_reference, proximal_scalars

from ...graph import DTYPE_NAMES, GraphIndex
from ..base import NoMatch, named_apart, named_apart_caveat, require, same_shape, shapes_differ
from .evaluate import Evaluator
from .hypothesis import (
    Counterexample,
    Proposal,
    evaluate,
    is_float_scalar,
    magnitudes,
    nudges,
    points,
    tensor_type,
)
from .proof import Probe
from .region import Region

Bound = str | np.ndarray  # where a scalar of the fused op comes from: a runtime scalar (its name) or a constant

_INFER_DRAWS = 2


def propose(index: GraphIndex, region: Region, rng: np.random.Generator) -> list[Proposal]:
    var, delta = region.tensors
    require(not region.others, f"reads runtime tensors besides var and delta ({', '.join(sorted(region.others))})")
    require(not region.numels, "divides by an element count, which no proximal update does")
    dtype = tensor_type(index, region, [var, delta], "var and delta")
    expand = {} if same_shape(index, var, delta) else _expand_both(index, var, delta)
    for s in region.scalars:
        require(is_float_scalar(index, s, dtype), f"the scalar {s} is neither float32 nor {DTYPE_NAMES[dtype]}")
    # alpha, l1 and l2 are runtime scalars the region reads, or one-element values it computes from them
    names = region.scalars + [index.nodes[i].output[0] for i in region.nodes if i in region.independent]
    draws = [_with_computed(index, region, draw) for draw in _draws(index, region.scalars, rng)]
    mags = magnitudes(region)
    inferred = [_infer(index, region, var, delta, draw, mags) for draw in draws[:_INFER_DRAWS]]
    alpha = _bind(names, draws, [q[0] for q in inferred])
    if alpha is None:
        raise NoMatch("the step alpha is neither a runtime scalar nor a constant")
    require(isinstance(alpha, str) or float(alpha) != 0, "the result does not depend on delta")
    form, l1, l2 = _scalar_form(names, draws, inferred, alpha)
    cap = inferred[0][3]
    attrs: dict[str, object] = {"scalar_form": form}
    shrink_max = float(np.float32(cap)) if np.isfinite(cap) else np.inf
    if np.isfinite(cap):
        attrs["shrink_max"] = shrink_max

    def value(v: Bound, leaves: dict[str, np.ndarray]) -> np.ndarray:
        return leaves[v] if isinstance(v, str) else np.asarray(v, np.float64)

    def contract(leaves: dict[str, np.ndarray], in_float32: bool = False) -> np.ndarray:
        if in_float32:  # |p| - t cancels at the threshold: there only the kernel's own rounding compares
            return _in_float32(leaves[var], value(alpha, leaves), value(l1, leaves), value(l2, leaves), leaves[delta],
                               form, shrink_max)
        return proximal_gd_reference(leaves[var], value(alpha, leaves), value(l1, leaves), value(l2, leaves),
                                     leaves[delta], form, shrink_max)

    roles = {var: "var", delta: "delta"}
    for v, role in ((alpha, "alpha"), (l1, "l1"), (l2, "l2")):
        if isinstance(v, str):
            roles.setdefault(v, role)
    def probes() -> Iterator[Probe]:
        for draw in draws:
            a = float(value(alpha, draw).reshape(-1)[0])
            t, _ = proximal_scalars(a, float(value(l1, draw).reshape(-1)[0]), float(value(l2, draw).reshape(-1)[0]),
                                    form)
            yield _probe(region, var, delta, a, t, mags, draw, rng)

    caveats = [named_apart_caveat(index, var, delta)] if expand else []
    return [Proposal(PROXIMAL_GD, attrs, [var, alpha, l1, l2, delta], roles, contract, probes(), dtype,
                     expand=expand, caveats=caveats)]


def _in_float32(var: np.ndarray, alpha: np.ndarray, l1: np.ndarray, l2: np.ndarray, delta: np.ndarray, form: str,
                shrink_max: float) -> np.ndarray:
    """The contract computed as the kernel computes it: float32 throughout (fused_ops)."""
    f = np.float32
    a, s1, s2 = (f(np.asarray(v).reshape(-1)[0]) for v in (alpha, l1, l2))
    with np.errstate(all="ignore"):
        if form == "raw":
            t, k = a * s1, f(1) + a * s2
        elif form == "folded":
            t, k = s1, s2
        else:
            t, k = s1, f(1) / s2
        p = np.asarray(var, f) - a * np.asarray(delta, f)
        shrunk = np.minimum(np.maximum(np.abs(p) - t, f(0)), f(shrink_max))
        shrunk = np.where(np.isnan(p), p, shrunk)
        out = np.where(np.isnan(p), p, np.sign(p)) * shrunk / k
    return out.astype(np.float64)


def _expand_both(index: GraphIndex, var: str, delta: str) -> dict[int, int]:
    """{var: delta, delta: var} when var and delta are named_apart (an Expand of each to the
    other's shape gives both the shape of the graph's own broadcast); NoMatch otherwise."""
    require(named_apart(index, var, delta), shapes_differ(index, var, delta, "var and delta"))
    return {0: 4, 4: 0}


def _draws(index: GraphIndex, scalars: list[str], rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
    """Values of the runtime scalars: two positive draws for inference, one of larger values, every
    sign pattern (all of them for up to three scalars: a threshold lr * l1 is negative only when
    exactly one of the two is), and one with zeros (l1 = 0, l2 = 0 are real settings)."""
    n = len(scalars)
    patterns = [[(m >> j) & 1 for j in range(n)] for m in range(1, 2**n)] if n <= 3 else \
        [list(rng.integers(0, 2, n)) for _ in range(8)]
    draws = []
    zeros = 3 + len(patterns)  # the first of two draws with every other scalar 0
    for k in range(zeros + 2):
        draw = {}
        for j, s in enumerate(scalars):
            v = rng.uniform(0.5, 3.0) if k == 2 else rng.uniform(0.05, 0.5)
            if 3 <= k < 3 + len(patterns) and patterns[k - 3][j]:
                v = -v
            if k >= zeros and j % 2 == k - zeros:
                v = 0.0
            draw[s] = np.asarray(v)  # 0-D whatever its rank: the probes are one axis of points
        draws.append(draw)
    return draws


def _with_computed(index: GraphIndex, region: Region, draw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The draw with the one-element values the region computes from it."""
    nodes = [index.nodes[i] for i in region.nodes if i in region.independent]
    values = Evaluator(index, wide=True).run(nodes, {**region.constants, **draw})
    return {**draw, **{n.output[0]: np.asarray(values[n.output[0]], np.float64) for n in nodes}}


def _infer(index: GraphIndex, region: Region, var: str, delta: str, draw: dict[str, np.ndarray],
           mags: list[float]) -> tuple[float, float, float, float]:
    """(alpha, threshold t, divisor k, cap) of the region under one draw of its scalars."""
    big = 2.0**20 * max([1.0] + mags + [abs(float(v)) for v in draw.values()])
    leaves = {**draw, var: np.array([big, 2 * big, np.inf, 0.0, 0.0]), delta: np.array([0.0, 0.0, 0.0, big, 2 * big])}
    o = np.broadcast_to(evaluate(index, region, leaves), (5,))
    slope = (float(o[1]) - float(o[0])) / big
    if not np.isfinite(slope) or slope == 0:
        raise Counterexample(f"differs from every ApplyProximalGradientDescent at var={big:.9g} and {2 * big:.9g}, "
                             f"delta=0: the graph gives {float(o[0]):.9g} and {float(o[1]):.9g}, the fused op values "
                             "that grow with var")
    k = 1.0 / slope
    near = 2 * abs(big - float(o[0]) * k) + 1.0  # above the threshold, and small enough that t = near - out*k is exact
    t = near - float(np.broadcast_to(evaluate(index, region, {**draw, var: np.array([near]), delta: np.zeros(1)}),
                                     (1,))[0]) * k
    alpha = -k * (float(o[4]) - float(o[3])) / big
    return alpha, t, k, float(o[2]) * k


def _bind(scalars: list[str], draws: list[dict[str, np.ndarray]], values: list[float]) -> Bound | None:
    """The runtime scalar that held `values` in the inference draws, else a float32 constant when
    the values did not change, else None."""
    for s in scalars:
        if all(_close(float(draws[k][s].reshape(-1)[0]), values[k]) for k in range(len(values))):
            return s
    if all(np.isfinite(values)) and all(_close(v, values[0]) for v in values):
        return np.asarray(values[0], np.float32)
    return None


def _close(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= 1e-8 * max(abs(a), abs(b))


def _scalar_form(scalars: list[str], draws: list[dict[str, np.ndarray]], inferred: list[tuple],
                 alpha: Bound) -> tuple[str, Bound, Bound]:
    """(scalar_form, l1, l2): the threshold and divisor bound as they are, as a reciprocal, or as
    alpha * l1 and 1 + alpha * l2."""
    ts = [q[1] for q in inferred]
    ks = [q[2] for q in inferred]
    t = _bind(scalars, draws, ts)
    k = _bind(scalars, draws, ks)
    with np.errstate(all="ignore"):
        inv_k = _bind(scalars, draws, [float(1.0 / np.float64(x)) for x in ks])
    if t is not None and isinstance(k, str):
        return "folded", t, k
    if t is not None and isinstance(inv_k, str):
        return "folded_reciprocal", t, inv_k
    if t is not None and k is not None:
        # two constants: the one the graph stores exactly (a divisor, or its reciprocal as a multiplier)
        if inv_k is not None and float(np.float32(inv_k)) == float(inv_k) and float(np.float32(ks[0])) != ks[0]:
            return "folded_reciprocal", t, inv_k
        return "folded", t, k
    alphas = [q[0] for q in inferred]
    with np.errstate(all="ignore"):
        l1 = _bind(scalars, draws, [float(np.float64(x) / a) for x, a in zip(ts, alphas)])
        l2 = _bind(scalars, draws, [float((np.float64(x) - 1.0) / a) for x, a in zip(ks, alphas)])
    if l1 is not None and l2 is not None:
        return "raw", l1, l2
    raise NoMatch(f"the threshold ({ts[0]:.9g}) and divisor ({ks[0]:.9g}) are not runtime scalars, constants or "
                  "alpha * l1 and 1 + alpha * l2 of runtime scalars")


def _probe(region: Region, var: str, delta: str, alpha: float, t: float, mags: list[float],
           draw: dict[str, np.ndarray], rng: np.random.Generator) -> Probe:
    """p = var - alpha * delta on every piece: delta = 0 with var on the probe points; random
    var and delta around the threshold; var = 0 with delta placing p at the probe points; NaN and
    inf in delta."""
    on_var = points(rng, [t], mags)
    width = 4 * max(abs(t), 1.0)
    mixed_v, mixed_d = rng.uniform(-width, width, 24), rng.uniform(-4, 4, 24)
    by_delta = points(rng, [t], mags) / alpha if alpha != 0 else np.zeros(0)
    at, by = nudges([t] + mags)
    by = by / alpha if alpha != 0 else by
    vars_ = np.concatenate([on_var, mixed_v, np.zeros(len(by_delta)), at, [1.0, 1.0, -1.0]])
    deltas = np.concatenate([np.zeros(len(on_var)), mixed_d, -by_delta, by, [np.nan, np.inf, -np.inf]])
    return Probe({**region.constants, **draw, var: vars_, delta: deltas})
