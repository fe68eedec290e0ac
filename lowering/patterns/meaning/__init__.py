"""Recognition by meaning: fuses a region when it computes a fused op's contract, however written.

The syntactic patterns (lowering.patterns.smooth_l1_grad, proximal_gd) stay the fast path; this
runs after them, on the kinks at a threshold they left (Sign, Relu, Shrink, or a comparison, Clip,
Min, Max of one tensor against constants or single elements). For each difference of two tensors
such a kink reads (lowering.patterns.meaning.region), every elementwise value downstream of it is
a candidate output, latest first. A candidate's region is
proposed as each fused op with its inputs bound and attributes inferred (smooth_l1, proximal),
and accepted only when evaluation proves it equal to the contract (proof); the first accepted
candidate per difference is fused, through the same Match the syntactic patterns return. When none
is, the report gets the most telling reason: a counterexample where one was found.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from ...algebra import Algebra
from ...beside import Beside, Claims, can_fork
from ...graph import FLOAT_TYPES, GraphIndex, node_label
from ..base import Match, NoMatch
from . import proximal, smooth_l1
from .evaluate import Unsupported
from .hypothesis import Counterexample, Proposal, narrowest
from .proof import check
from .region import (
    KINKS,
    Either,
    Region,
    RegionRefused,
    Walks,
    build,
    differences_behind,
    forward_cone,
    is_threshold_kink,
)
from .screen import screen_joint, screen_region

MIN_SHARED = 256  # the least number of differences worth a child (each takes a millisecond or two)
SEED = 18  # probes are drawn from this seed and the candidate's position: the same region, the same verdict
MAX_OUTPUTS = 10  # candidate outputs tried per difference
FAMILIES = {"smooth_l1_grad": smooth_l1.propose, "proximal_gd": proximal.propose}


@dataclass
class Refusal:
    anchor: int  # the candidate output's node
    family: str
    reason: str
    # lower is more telling: 0 for a region evaluated (a counterexample, or proven but not
    # closed), 1 for one refused before; then the later output (the larger region); then fewer
    # mismatching probes
    rank: tuple[int, int, int]
    covers: set[int] = field(default_factory=set)  # the nodes of every region tried around the difference


Outcome = tuple[Match | None, Refusal | None]
# starts a child applying a function to the items handed it (lowering.proof.beside.proving_child)
Fork = Callable[[Callable[[None], list[tuple[int, Outcome]]]], "Beside[None, list[tuple[int, Outcome]]] | None"]


def recognise(alg: Algebra, skip: set[int], closed: Callable[[Match], Match],
              refused: frozenset[int] | set[int] = frozenset(),
              fork: Fork | None = None) -> tuple[list[Match], list[Refusal]]:
    """Matches found by meaning among the nodes not in alg.taken or `skip`, each already checked
    by `closed` (the pass's own closure check, which may raise NoMatch); and one refusal per
    difference that did not fuse. A region around a node a pattern `refused` must hold that node:
    a part of a function the patterns refused is not fused on its own. With `fork`, a child
    works out differences beside this process (_shared)."""
    index = alg.index
    differences: dict[int, None] = {}
    for op in sorted(KINKS):
        for i in index.by_op.get(op, ()):
            if i not in alg.taken and i not in skip and is_threshold_kink(index, index.nodes[i]):
                differences.update(dict.fromkeys(differences_behind(index, i, alg.taken)))
    order = sorted(differences, reverse=True)
    ahead = _shared(alg, order, skip, closed, refused, fork) if fork is not None and len(order) >= MIN_SHARED else {}
    matches: list[Match] = []
    refusals: list[Refusal] = []
    for d in order:
        if d in alg.taken:
            continue
        found, refusal = ahead[d] if d in ahead else _around(alg, d, skip, closed, refused)
        if found is not None:
            matches.append(found)
            alg.taken |= found.interior
            # what was worked out ahead did not know this match took its nodes
            ahead = {}
        elif refusal is not None:
            refusals.append(refusal)
    return matches, refusals


def _shared(alg: Algebra, order: list[int], skip: set[int], closed: Callable[[Match], Match],
            refused: frozenset[int] | set[int], fork: Fork) -> dict[int, Outcome]:
    """Outcomes of differences worked out ahead, with the nodes taken now, by this process and a
    child, each taking the next difference nobody has: what recognise would find for each up to
    its first match (after that, recognise works them out again, in order). Empty when no child
    can run."""
    if not can_fork():
        return {}
    try:
        claims = Claims(len(order))
    except (OSError, ImportError):  # no shared memory for the counter here
        return {}

    def ahead() -> Iterator[tuple[int, Outcome]]:
        while (k := claims.claim()) is not None:
            outcome = _around(alg, order[k], skip, closed, refused)
            yield order[k], outcome
            if outcome[0] is not None:
                claims.close()  # past a match, nothing worked out ahead is what recognise finds

    child = fork(lambda _: list(ahead()))
    if child is None:
        return {}
    try:
        child.submit(None, now=True)
        ours = dict(ahead())
        theirs = child.results()
    finally:
        child.stop()
    if theirs is not None:
        ours.update(theirs[0])
    return ours


def _around(alg: Algebra, d: int, skip: set[int], closed: Callable[[Match], Match],
            refused: frozenset[int] | set[int]) -> tuple[Match | None, Refusal | None]:
    index = alg.index
    best: Refusal | None = None
    covers = {d}
    walks = Walks(alg, Either(alg.taken, skip))  # a view: a union would copy every taken node per difference
    cone = forward_cone(walks, d)
    must_hold = refused.intersection(cone)
    outputs = [i for i in cone if index.elem_type(index.nodes[i].output[0]) in FLOAT_TYPES][:MAX_OUTPUTS]
    if not outputs:
        return None, None
    choices = _choices(alg, d)  # the same for every output: taken is fixed here
    names = [index.nodes[i].output[0] for i in outputs]
    screened = [screen_joint(walks, names, tensors, family, open_scalars=family == "proximal_gd")
                for family, tensors in choices]
    for out, output in zip(outputs, names):
        for k, (family, tensors) in enumerate(choices):
            known = screened[k].get(output)
            try:
                if known is not None:
                    covers.update(known.nodes)
                    if not must_hold <= known.nodes or not _has_kink(index, known.nodes):
                        continue
                    if known.broken is not None:
                        rank = (0, -out, 1 << 20)
                        if best is None or rank < best.rank:
                            best = Refusal(out, family, known.broken(), rank)
                        continue
                region = build(walks, output, tensors, open_scalars=family == "proximal_gd")
                if family == "smooth_l1_grad" and len(region.scalars) + len(region.others) > 1:
                    region = build(walks, output, tensors, open_all=True)
                covers.update(region.nodes)
                if not must_hold <= set(region.nodes) or not _has_kink(index, region.nodes):
                    continue
                broken = None if known is not None else screen_region(index, region, family)
                if broken is not None:
                    raise Counterexample(broken)
                # probes are drawn per candidate: a verdict does not depend on the candidates before
                decided = _decide(alg, family, region, out, closed, np.random.default_rng([SEED, d, out, k]))
            except Counterexample as exc:
                decided = Refusal(out, family, str(exc), (0, -out, 1 << 20))
            except (NoMatch, RegionRefused) as exc:
                decided = Refusal(out, family, str(exc), (1, -out, 0))
            except Unsupported as exc:  # inferring the attributes runs the region too, not only the proof
                decided = Refusal(out, family, f"the region holds {exc}", (1, -out, 0))
            if isinstance(decided, Match):
                return decided, None
            if best is None or decided.rank < best.rank:
                best = decided
    if best is not None:
        best.covers = covers
    return None, best


def _has_kink(index: GraphIndex, nodes: Iterable[int]) -> bool:
    """Whether a region holds a kink op: without one it is not piecewise, so no fused op (a bare
    var - alpha * delta is plain SGD)."""
    return any(index.nodes[i].op_type in KINKS for i in nodes)


def _choices(alg: Algebra, d: int) -> list[tuple[str, tuple[str, str]]]:
    """(family, tensors) bindings of a difference: predict - label for SmoothL1, var - alpha*delta
    (either side of an Add) for the proximal update. Exact widening Casts are looked through."""
    node = alg.index.nodes[d]
    a, b = node.input
    out = []
    if node.op_type == "Sub":
        out.append(("smooth_l1_grad", (alg.widened(a), alg.widened(b))))
        out.append(("proximal_gd", (alg.widened(a), _scaled_tensor(alg, b))))
    else:
        for this, other in ((a, b), (b, a)):
            negated = alg.producer(other, "Neg")
            if negated is not None:
                out.append(("smooth_l1_grad", (alg.widened(this), alg.widened(negated[1].input[0]))))
            out.append(("proximal_gd", (alg.widened(this), _scaled_tensor(alg, other))))
    return [(f, t) for f, t in out if t[0] != t[1]]


def _scaled_tensor(alg: Algebra, value: str) -> str:
    """The tensor that `value` scales by single elements (alpha * delta, delta * -lr, -delta / k)."""
    index = alg.index
    for _ in range(8):
        found = alg.producer(value, "Mul", "Div", "Neg", "Cast")
        if found is None:
            break
        node = found[1]
        if node.op_type in ("Neg", "Cast"):
            value = node.input[0]
        elif node.op_type == "Div" and index.numel(node.input[1]) == 1:
            value = node.input[0]
        elif node.op_type == "Mul" and index.numel(node.input[1]) == 1:
            value = node.input[0]
        elif node.op_type == "Mul" and index.numel(node.input[0]) == 1:
            value = node.input[1]
        else:
            break
    return alg.widened(value)


def _decide(alg: Algebra, family: str, region: Region, out: int, closed: Callable[[Match], Match],
            rng: np.random.Generator) -> Match | Refusal:
    """The first proposal of `family` for the region that proves true and closed, else the
    refusal of the best ranked one."""
    index = alg.index
    best: Refusal | None = None
    for proposal in FAMILIES[family](index, region, rng):
        verdict = check(index, region, proposal.probes, proposal.contract, proposal.described(), proposal.roles,
                        proposal.dtype, narrowest(index, region, proposal.dtype))
        if not verdict.holds:
            refusal = Refusal(out, family, verdict.reason, (0, -out, verdict.mismatches) if verdict.mismatches
                              else (1, -out, 0))
        else:
            match = _match(index, family, region, proposal)
            try:
                _require_body_inputs(index, match)
                match = closed(match)
                return match
            except NoMatch as exc:
                refusal = Refusal(out, family, f"computes {proposal.described()}, but {exc}", (0, -out, 0))
        if best is None or refusal.rank < best.rank:
            best = refusal
    if best is None:  # every family's propose returns at least one proposal or raises NoMatch
        raise NoMatch(f"no {family} hypothesis to check")
    return best


def _match(index: GraphIndex, family: str, region: Region, proposal: Proposal) -> Match:
    """The Match of an accepted proposal: the region's nodes that compute the output from the
    bound inputs; one-element math and the numel and fill nodes are boundary (kept for other readers)."""
    members = _needed(index, region, {v for v in proposal.inputs if isinstance(v, str)})
    boundary = members & (region.boundary | region.independent)
    return Match(f"{family}/meaning", proposal.op_type, region.output, proposal.dtype, list(proposal.inputs),
                 dict(proposal.attrs), interior=members - boundary, boundary=boundary,
                 caveats=list(proposal.caveats), expand=dict(proposal.expand))


def _needed(index: GraphIndex, region: Region, inputs: set[str]) -> set[int]:
    """The region's nodes (evaluated, numel and fill) the output needs when `inputs` are given."""
    allowed = set(region.nodes) | region.side | region.boundary
    needed: set[int] = set()
    stack = [region.output]
    while stack:
        value = stack.pop()
        i = index.producer.get(value)
        if value in inputs or i is None or i in needed or i not in allowed:
            continue
        needed.add(i)
        stack.extend(v for v in index.nodes[i].input if v)
    return needed


def _require_body_inputs(index: GraphIndex, match: Match) -> None:
    """Every value the matched nodes read is computed among them, is an input of the fused node
    or is a constant: the function body can then be built from them alone."""
    members = match.interior | match.boundary
    made = {name for i in members for name in index.nodes[i].output}
    given = {v for v in match.inputs if isinstance(v, str)}
    for i in sorted(members):
        for name in index.nodes[i].input:
            if name and name not in made and name not in given and index.const(name) is None:
                raise NoMatch(f"{node_label(index.nodes[i])} reads {name}, which is neither an input of the fused node "
                              "nor a constant")
