"""A necessary condition each candidate region meets before its hypotheses are inferred and proved.

Both fused functions have properties that hold for every value of their other inputs:
  SmoothL1LossGradV2(p + s, l + s, dout) == SmoothL1LossGradV2(p, l, dout)   (a function of p - l)
  SmoothL1LossGradV2(l, p, dout) == -SmoothL1LossGradV2(p, l, dout)          (odd in p - l)
  SmoothL1LossGradV2(l + F, l, dout) == SmoothL1LossGradV2(l + 2F, l, dout)  (constant past sigma,
                                                                             for F = 2^60 > sigma)
  ApplyProximalGradientDescent(-var, -delta, ...) == -ApplyProximalGradientDescent(var, delta, ...)
A region equal to the contract as a function of its leaves (which is what the proof establishes,
with the runtime leaves drawn freely) therefore has the same properties at any point, so a region
that breaks one at one pair of points is not the fused op, whatever its attributes: the two points
are the counterexample. The screen runs the region once, on a few points and their images side by
side, in float64 with inputs of 8 significant bits, so that p + s, l + s and p - l are exact and a
region that computes a function of p - l gives the same bits at both points.

Most kinks over a difference in a model are not one of the fused functions (a residual Add before
a Relu); the screen turns them away at the cost of one evaluation, where inferring attributes and
proving takes dozens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from contracts.fused_ops import PROXIMAL_GD, SMOOTH_L1_GRAD

from ...graph import FLOAT_TYPES, GraphIndex
from .evaluate import Evaluator, Unsupported
from .hypothesis import numel_leaves
from .proof import fmt
from .region import MAX_NODES, MAX_RUNTIME_LEAVES, Region, RegionRefused, Walks, build_joint

_POINTS = 8  # points per point set; one failing is enough, and a true region passes at all of them
_NUMEL = 7  # the element count numel leaves hold (any positive count: it is fixed across the point sets)
_FLOATS = frozenset(FLOAT_TYPES) | {None}  # a leaf of unknown type is drawn as a float, as the proof draws it
_RTOL = 1e-9  # far above the rounding of a spelling that distributes a division, far below a real difference


def _dyadic(rng: np.random.Generator) -> np.ndarray:
    """Nonzero values of 8 significant bits between 2^-6 and 2^6, of both signs: sums and
    differences of two of them are exact in float64."""
    mantissa = rng.integers(128, 256, _POINTS)
    return mantissa * np.exp2(rng.integers(-13, -1, _POINTS).astype(np.float64)) * rng.choice([-1.0, 1.0], _POINTS)


# the points are fixed: any point shows a region that lacks the symmetry, almost surely, and a
# region that has it passes at every point
_RNG = np.random.default_rng(18)
_A, _B, _S = _dyadic(_RNG), _dyadic(_RNG), _dyadic(_RNG)
_SCALARS = _RNG.uniform(0.25, 2.0, 6) * _RNG.choice([-1.0, 1.0], 6)  # runtime scalars: dout, alpha, l1, l2, ...
_OTHERS = _RNG.uniform(0.25, 2.0, _POINTS) * _RNG.choice([-1.0, 1.0], _POINTS)  # a full-shape dout
_FAR = 2.0**60  # a difference past any sigma a model uses


@dataclass(frozen=True)
class Check:
    """The family's result at point set `second` is `sign` times its result at point set `first`."""
    first: int
    second: int
    sign: float
    why: str  # the property, with {u} and {w} for the two tensors


# per family: the point sets (u, w) the region runs on side by side, and the checks between them
_POINT_SETS: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {
    "smooth_l1_grad": [(_A, _B), (_A + _S, _B + _S), (_B, _A), (_B + _FAR, _B), (_B + 2 * _FAR, _B),
                       (_B - _FAR, _B), (_B - 2 * _FAR, _B)],
    "proximal_gd": [(_A, _B), (-_A, -_B)],
}
_PLATEAU = f"{SMOOTH_L1_GRAD}'s gradient stays constant once |{{u}} - {{w}}| passes sigma"
_CHECKS: dict[str, list[Check]] = {
    "smooth_l1_grad": [Check(0, 1, 1.0, f"{SMOOTH_L1_GRAD}'s gradient is a function of {{u}} - {{w}} alone"),
                       Check(0, 2, -1.0, f"{SMOOTH_L1_GRAD}'s gradient changes sign when {{u}} and {{w}} swap"),
                       Check(3, 4, 1.0, _PLATEAU), Check(5, 6, 1.0, _PLATEAU)],
    "proximal_gd": [Check(0, 1, -1.0, f"{PROXIMAL_GD} is odd in ({{u}}, {{w}})")],
}


def screen_region(index: GraphIndex, region: Region, family: str) -> str | None:
    """None when the region may compute the family's fused op; else why it cannot, in one line."""
    values = _run(index, region, family)
    broken = None if values is None else _verdicts(family, region.tensors, [values[region.output]])[0]
    return None if broken is None else broken()


@dataclass
class Screened:
    nodes: set[int]  # the output's own region (what build would give it)
    broken: Callable[[], str] | None  # why it cannot be the family's op (formatted when asked), or None


def screen_joint(walks: Walks, outputs: list[str], tensors: tuple[str, str], family: str,
                 open_scalars: bool) -> dict[str, Screened]:
    """screen_region for each output's region at the cost of one evaluation: the regions of the outputs
    around one difference overlap, and one joint region (lowering.patterns.meaning.region.build_joint)
    computes each output as its own region would. Outputs where the joint region would not (a
    region build refuses or opens up further, another output read as a leaf) are left out: the
    caller builds and screens them one at a time."""
    index = walks.alg.index
    try:
        joint = build_joint(walks, outputs, tensors, open_scalars, max_nodes=4 * MAX_NODES, max_leaves=64)
    except RegionRefused:
        return {}
    depends = walks.depends(tensors)
    if not all(depends(o) for o in outputs):
        return {}  # an output past the dependence horizon would be a leaf in another output's region
    values = _run(index, joint, family)
    if values is None:
        return {}
    producers = {index.nodes[i].output[0]: i for i in joint.nodes}
    runtime = set(joint.scalars) | set(joint.others)
    owns = {}
    for output in outputs:
        nodes, leaves = _own(index, producers, runtime, output)
        too_many = len(leaves) > (1 if family == "smooth_l1_grad" and not open_scalars else MAX_RUNTIME_LEAVES)
        if len(nodes) <= MAX_NODES and not too_many:  # else refused, or opened up further, by its own build
            owns[output] = nodes
    verdicts = _verdicts(family, tensors, [values[o] for o in owns])
    return {o: Screened(nodes, broken) for (o, nodes), broken in zip(owns.items(), verdicts)}


def _own(index: GraphIndex, producers: dict[str, int], runtime: set[str], output: str) -> tuple[set[int], set[str]]:
    """The joint region's nodes one output reads, and the runtime leaves they read."""
    nodes: set[int] = set()
    leaves: set[str] = set()
    stack = [output]
    while stack:
        value = stack.pop()
        i = producers.get(value)
        if i is None:
            if value in runtime:
                leaves.add(value)
        elif i not in nodes:
            nodes.add(i)
            stack.extend(v for v in index.nodes[i].input if v)
    return nodes, leaves


def _run(index: GraphIndex, region: Region, family: str) -> dict[str, np.ndarray] | None:
    """Every value of the region on the family's point sets side by side; None when the region
    reads a leaf that is not a float or holds an op the evaluator does not run (the hypotheses say
    why)."""
    u, w = region.tensors
    if any(index.elem_type(v) not in _FLOATS for v in (u, w, *region.scalars, *region.others)):
        return None
    sets = _POINT_SETS[family]
    leaves: dict[str, np.ndarray] = {**region.constants, **numel_leaves(index, region, _NUMEL),
                                     u: np.concatenate([x for x, _ in sets]), w: np.concatenate([y for _, y in sets])}
    for k, name in enumerate(region.scalars):
        leaves[name] = np.asarray(_SCALARS[k % len(_SCALARS)])  # 0-D whatever its rank: the points are one axis
    for k, name in enumerate(region.others):
        leaves[name] = np.tile(np.roll(_OTHERS, k), len(sets))
    try:
        return Evaluator(index, wide=True).run([index.nodes[i] for i in region.nodes], leaves)
    except Unsupported:
        return None


def _verdicts(family: str, tensors: tuple[str, ...], values: list[np.ndarray]) -> list[Callable[[], str] | None]:
    """The verdict on each output's values: all outputs are compared at once, as one array; a
    broken symmetry's reason is formatted only if it is reported."""
    if not values:
        return []
    sets, checks = _POINT_SETS[family], _CHECKS[family]
    n = len(sets) * _POINTS
    out = np.stack([np.broadcast_to(np.asarray(v, np.float64), (n,)) for v in values]).reshape(len(values), -1, _POINTS)
    firsts = [c.first for c in checks]
    seconds = [c.second for c in checks]
    signs = np.array([c.sign for c in checks])[None, :, None]
    bad = _differ(signs * out[:, firsts], out[:, seconds])  # (outputs, checks, points)
    verdicts: list[Callable[[], str] | None] = []
    for row, where in enumerate(np.asarray(bad.any(axis=2))):
        if not where.any():
            verdicts.append(None)
            continue
        k = int(np.flatnonzero(where)[0])
        j = int(np.flatnonzero(bad[row, k])[0])
        check = checks[k]
        verdicts.append(partial(_reason, family, check.why, (tensors[0], tensors[1]),
                                (sets[check.first][0][j], sets[check.first][1][j]), out[row, check.first, j],
                                (sets[check.second][0][j], sets[check.second][1][j]), out[row, check.second, j]))
    return verdicts


def _differ(want: np.ndarray, got: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        same = (want == got) | (np.isnan(want) & np.isnan(got)) \
            | (np.abs(want - got) <= _RTOL * np.maximum(1.0, np.maximum(np.abs(want), np.abs(got))))
    return ~same


def _reason(family: str, why: str, names: tuple[str, str], at: tuple[float, float], base: float,
            image: tuple[float, float], got: float) -> str:
    u, w = names
    op = SMOOTH_L1_GRAD if family == "smooth_l1_grad" else PROXIMAL_GD
    return (f"differs from every {op} ({why.format(u=u, w=w)}): at {u}={fmt(at[0])}, {w}={fmt(at[1])} the graph "
            f"gives {fmt(base)}, at {u}={fmt(image[0])}, {w}={fmt(image[1])} {fmt(got)}")
