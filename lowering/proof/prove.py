"""Proves a match equal to its fused op's contract, or refuses it with a counterexample.

Three questions, each put to an SMT solver over the reals (z3) with the match and the contract
built by one semantics (lowering.proof.semantics):

1. Real arithmetic. For every finite input (runtime scalars and element counts unknowns too,
   within the op's domain), does the region compute what the contract computes? Constants are
   exact rationals; a narrowing Cast inside the region is an unknown function.
2. Non-finite inputs. With any input +-inf or NaN, does it still? A difference only here is
   waived by `assume_finite` (and noted), otherwise refused.
3. Overflow. With every input finite and in its type's range, can an intermediate overflow (and
   change the result) where the exact result is more than OVERFLOW_MARGIN inside the range? A
   constant scaling done in another order overflows only within a constant factor of the range
   (like rounding); a product of two input-dependent terms, or a square, does not.

The kernel's parameters (sigma, 1/sigma, the scale) are taken from the region by exact evaluation
and its constants (fused_ops.ProofSpec.derive); each must equal the kernel's own up to the
rounding of a float32 attribute. Rounding is not this module's question (the recogniser checks it
in the graph's dtype), except where it is a matter of structure: a region that adds a constant
and takes it away again is refused, since the sum's rounding drops whatever lies below the
constant's last digit ((x + 64) - 64 is 0 in float16 for |x| < 0.03), however exact it is over
the reals.

Proofs are cached per structure (lowering.proof.structure) under the relations between the
constants (lowering.proof.relations): that proof holds for every instance with the same
structure and relations, so ten thousand copies of a form with ten thousand different constants
cost one proof. When the relations are not enough to decide, the instance is proved with its own
constants.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np
import onnx

from contracts.fused_ops import OP_SPECS, ProofSpec

from ..algebra import Algebra
from ..graph import dtype_name
from ..patterns.base import Match, same_shape
from ..patterns.meaning.evaluate import np_type
from . import bounds, relations, rounding, store
from .formula import liveness, run
from .semantics import FIN, NAN, NINF, PINF, ExactBackend, Ext, Semantics, Undetermined
from .structure import OVERFLOWING, Structure, Unprovable, build, exact_value, float_max, overflow_at

TIMEOUT_MS = 4000  # per solver query; unknown is a refusal, never a proof
# a value within this factor of its type's range is "near the range": an overflow the graph and the
# kernel meet at different points only there is a constant scaling done in another order
OVERFLOW_MARGIN: dict[int, Fraction] = {
    onnx.TensorProto.FLOAT: Fraction(2) ** 20, onnx.TensorProto.DOUBLE: Fraction(2) ** 20,
    onnx.TensorProto.FLOAT16: Fraction(2) ** 4, onnx.TensorProto.BFLOAT16: Fraction(2) ** 20}
# how far a derived parameter may be from its attribute: the rounding of a constant of the graph's type
_ATTR_ROUNDING: dict[int, Fraction] = {onnx.TensorProto.FLOAT16: Fraction(1, 1 << 9),
                                       onnx.TensorProto.BFLOAT16: Fraction(1, 1 << 6)}
_ATTR_ROUNDING_DEFAULT = Fraction(1, 1 << 20)
_CACHE_SIZE = 4096


@dataclass
class Verdict:
    holds: bool
    reason: str = ""  # when it does not: the counterexample, in one line
    caveats: list[str] = field(default_factory=list)
    waived: bool = False  # holds only because non-finite inputs were waived (assume_finite)
    attrs: dict[str, object] = field(default_factory=dict)  # attribute values the proof chose (a variant)
    # refused because the solver did not decide in time: kept for this run, never stored or
    # handed between processes (on a less busy machine it may decide)
    undecided: bool = False


@dataclass
class _Setting:
    """One match, ready to encode: its structure, how its fused inputs map to leaves and
    constants, its constants and element counts, its parameters."""

    structure: Structure
    spec: ProofSpec
    op_type: str
    attrs: Mapping[str, object]
    roles: list[tuple[str, tuple[str, int]]]  # role -> ("in", leaf) | ("c", constant)
    constants: list[Fraction | float | bool]  # the structure's, then constant inputs, then static counts
    numel_refs: list[tuple[str, int]]  # per count leaf: ("c", constant) | ("n", unknown count)
    unknown_counts: int
    norm: tuple[str, int] | None  # 1 / this count for reduction mean, else None (norm 1)
    params: dict[str, Fraction]
    param_exprs: dict[str, relations.Expr] | None  # in terms of the constants, when all have one
    leaf_dtypes: list[int | None]
    out_dtype: int | None
    fine: bool = True  # an open constant keeps all its relations to the others (else its sign alone)


_cache: dict[tuple, Verdict] = {}
_instances: dict[tuple, Verdict] = {}  # this process's verdicts per instance, before its parameters are derived
# the proved families of each structure under each relation of its constants: their parameters in
# terms of the constants, and the verdict
_families: dict[tuple, list[tuple[tuple, Verdict]]] = {}
_stored: dict[str, bool] = {"loaded": False, "dirty": False}


def clear_cache() -> None:
    """Forgets the proofs of this process (the store on disk stays: lowering.proof.store)."""
    _cache.clear()
    _instances.clear()
    _families.clear()
    _stored["loaded"] = True


def cached_verdicts() -> dict[tuple, Verdict]:
    """This process's decided verdicts by key (with what the stores held): what the store keeps,
    models/make_known_proofs.py ships and a child hands back (lowering.proof.beside)."""
    return {k: v for k, v in _cache.items() if not v.undecided}


def absorb(proved: Mapping[tuple, Verdict]) -> None:
    """Takes in the verdicts another process made (lowering.proof.beside), as if proved here."""
    load_stored()
    for key, verdict in proved.items():
        if key not in _cache:
            _remember(key, verdict)
            if len(key) == 4 and verdict.holds:
                _index_family(key, verdict)


def save_proofs() -> None:
    """Stores this run's new proofs for the next (called once a pass has run)."""
    if _stored["dirty"]:
        store.save(cached_verdicts())
        _stored["dirty"] = False


def load_stored() -> None:
    if not _stored["loaded"]:
        _stored["loaded"] = True
        _cache.update(store.load())
        for key, verdict in _cache.items():
            if len(key) == 4 and verdict.holds:
                _index_family(key, verdict)


def _index_family(key: tuple, verdict: Verdict) -> None:
    base, exprs, fine, rel = key
    _families.setdefault((base, fine, rel), []).append((exprs, verdict))


def prove(alg: Algebra, match: Match, assume_finite: bool = False, described: str | None = None) -> Verdict:
    """Whether `match` computes its fused op's contract (see the module docstring)."""
    spec = OP_SPECS.get(match.op_type)
    if spec is None or spec.proof is None:
        return Verdict(False, f"{match.op_type} has no contract a proof can compare with")
    described = described or _described(match)
    try:
        frame = _frame(alg, match, spec.proof, spec.inputs)
    except Unprovable as exc:
        return Verdict(False, f"is not proved equal to {described}: the match {exc}")
    # an instance seen before (the same structure, constants and attributes) has its verdict
    base = _base_key(frame, assume_finite)
    instance = (base, tuple(frame.constants), tuple(sorted((k, repr(v)) for k, v in match.attrs.items())), described)
    found = _instances.get(instance) or _family_verdict(match, frame, base)
    if found is not None:
        return found
    try:
        verdict = _prove_frame(alg, match, frame, assume_finite, described)
    except ctypes.ArgumentError as exc:
        # z3 is called through ctypes, which reports a Ctrl-C during a call as a bad argument
        if "KeyboardInterrupt" in str(exc):
            raise KeyboardInterrupt from None
        raise
    if len(_instances) >= _CACHE_SIZE:
        _instances.pop(next(iter(_instances)))
    _instances[instance] = verdict
    return verdict


def _family_verdict(match: Match, frame: _Setting, base: tuple) -> Verdict | None:
    """The verdict of a proved family this instance belongs to: its constants stand in the
    family's relations, and the family's parameters, evaluated at them, are the fused node's.
    That is what deriving the parameters from the region and looking the family up would find,
    without evaluating the region. `base` is the frame's _base_key."""
    finite = [c for c in frame.constants if isinstance(c, Fraction)]
    if not finite or _fixes_mean(match, frame):
        return None
    load_stored()
    kernel: Mapping[str, Fraction] | None = None
    for fine in (False, True):
        rel = relations.signature(finite) if fine else relations.signs(finite)
        for exprs, verdict in _families.get((base, fine, rel), ()):
            if kernel is None:
                kernel = OP_SPECS[match.op_type].proof.kernel(frame.attrs)  # type: ignore[union-attr]
            params = {name: relations.evaluate(e, finite) for name, e in exprs}
            # the parameters as the fused node states them, to a float32 attribute's rounding: the
            # family whose parameters a derivation from this node's attributes would give (with
            # the looser rounding of a half-precision graph's constants, two constants 0.3 and
            # 0.3 rounded to float16 would both pass for a sigma, and the verdict would hang on
            # which family a run proved first)
            if _parameter_mismatch(kernel, params, None) is None:
                return verdict
    return None


def _fixes_mean(match: Match, s: _Setting) -> bool:
    """Whether `_fixed_mean` decides this match."""
    return match.attrs.get("reduction") == "mean" and s.norm is not None and s.norm[0] == "n" \
        and not s.structure.numels


def _prove_frame(alg: Algebra, match: Match, frame: _Setting, assume_finite: bool, described: str) -> Verdict:
    try:
        setting = _with_params(alg, match, frame)
    except _Mismatch as exc:
        return Verdict(False, f"differs from {described}: {exc}")
    fixed = _fixed_mean(alg, match, setting, assume_finite)
    return fixed if fixed is not None else _prove_setting(alg, match, setting, assume_finite, described)


def _fixed_mean(alg: Algebra, match: Match, setting: _Setting, assume_finite: bool) -> Verdict | None:
    """A "mean" whose region divides by a constant, where the first input's element count is
    unknown (a function body): the kernel would divide by the count it sees, the graph by the
    number it holds. The same region with reduction none (sum for a one-element dout) and that
    number as the scale is what the graph computes; its verdict, with those attributes."""
    if not _fixes_mean(match, setting):
        return None
    dout = match.inputs[2] if len(match.inputs) > 2 else None
    single = not isinstance(dout, str) or alg.index.numel(dout) == 1
    plain = replace(match, attrs={**match.attrs, "reduction": "sum" if single else "none", "scale": 1.0})
    probe = _with_params(alg, plain, _frame(alg, plain, setting.spec, OP_SPECS[match.op_type].inputs), check=False)
    scale = probe.params.get("scale")
    if scale is None:
        return None
    attrs = {"reduction": plain.attrs["reduction"], "scale": float(np.float32(float(scale)))}
    fixed = replace(match, attrs={**match.attrs, **attrs})
    verdict = prove(alg, fixed, assume_finite)
    return replace(verdict, attrs={**attrs, **verdict.attrs}) if verdict.holds else None


def _prove_setting(alg: Algebra, match: Match, setting: _Setting, assume_finite: bool, described: str) -> Verdict:
    load_stored()
    base = _base_key(setting, assume_finite)
    concrete_key = (base, tuple(setting.constants), tuple(sorted(setting.params.items())))
    found = _cache.get(concrete_key)
    if found is not None:
        return found
    # a proof for the whole family of this structure leaves every finite constant open, bound
    # only by its relations to the others
    varying = frozenset(j for j, c in enumerate(setting.constants) if isinstance(c, Fraction))
    families: list[tuple[tuple, bool]] = []
    if varying and setting.param_exprs is not None:
        finite_consts = [c for c in setting.constants if isinstance(c, Fraction)]
        family = (base, tuple(sorted(setting.param_exprs.items())))
        # first with the coarse relations (one proof for a whole family of a form), then with
        # every relation between the constants
        coarse_key = family + (False, relations.signs(finite_consts))
        found = _cache.get(coarse_key)
        if found is not None and found.holds:
            return found
        fine_key = family + (True, relations.signature(finite_consts))
        found = _cache.get(fine_key)
        if found is not None and found.holds:
            return found
        families = [(coarse_key, False), (fine_key, True)]
    refused = _quick_counterexample(alg, match, setting, described)
    if refused is None:
        # a matter of structure, settled before any family is proved: a family proof then holds
        # only for regions that lose no significance
        refused = _lost_significance(alg, match, setting, described)
    if refused is not None:
        _remember(concrete_key, refused)
        return refused
    for key, fine in families:
        if key not in _cache:
            found = _decide(alg, match, replace(setting, fine=fine), assume_finite, generic=varying,
                            described=described)
            _remember(key, found)
            if found.holds:
                _index_family(key, found)
                return found
    verdict = _decide(alg, match, setting, assume_finite, generic=frozenset(), described=described)
    _remember(concrete_key, verdict)
    return verdict


def _remember(key: tuple, verdict: Verdict) -> None:
    if len(_cache) >= _CACHE_SIZE:
        _cache.pop(next(iter(_cache)))
    _cache[key] = verdict
    _stored["dirty"] = True


def _base_key(s: _Setting, assume_finite: bool) -> tuple:
    text_attrs = tuple(sorted((k, v) for k, v in s.attrs.items() if isinstance(v, str)))
    return (s.structure.key, s.op_type, text_attrs, tuple(s.roles), tuple(s.numel_refs), s.norm,
            tuple(type(c).__name__ if isinstance(c, Fraction) else c for c in s.constants),
            tuple(s.leaf_dtypes), s.out_dtype, assume_finite)


def _described(match: Match) -> str:
    attrs = ", ".join(f"{k}={v:.9g}" if isinstance(v, float) else f"{k}={v}" for k, v in match.attrs.items())
    return f"{match.op_type}({attrs})"


class _Mismatch(Exception):
    """The region's parameters are not the fused node's."""


# -- the setting ------------------------------------------------------------------------------

def _frame(alg: Algebra, match: Match, proof: ProofSpec, role_names: Sequence[str]) -> _Setting:
    """The match's setting without its parameters: what its structure reads, and from where."""
    index = alg.index
    s = build(alg, match)
    constants: list[Fraction | float | bool] = list(s.constants)
    roles: list[tuple[str, tuple[str, int]]] = []
    for role, value in zip(role_names, match.inputs):
        const = index.const(value) if isinstance(value, str) else np.asarray(value)
        if isinstance(value, str) and value in s.leaves:
            roles.append((role, ("in", s.leaves.index(value))))
        elif isinstance(value, str) and s.leaf_refs.get(value, ("", 0))[0] == "c":
            roles.append((role, s.leaf_refs[value]))
        elif const is not None:
            # a constant input the region holds too is that constant (alpha is the step it multiplies by)
            held = exact_value(const)
            same = [j for j, c in enumerate(constants) if type(c) is type(held) and c == held]
            roles.append((role, ("c", same[0] if same else len(constants))))
            if not same:
                constants.append(held)
        else:  # an input the region does not read (dout folded to 1 elsewhere, an unused l2)
            roles.append((role, ("free", len(roles))))
    main = match.inputs[0] if isinstance(match.inputs[0], str) else None
    counts: dict[str, tuple[str, int]] = {}
    unknown = 0

    def count_ref(tensor: str) -> tuple[str, int]:
        nonlocal unknown
        static = _static_numel(index, tensor)
        if static is not None:
            constants.append(Fraction(static))
            return ("c", len(constants) - 1)
        who = "main" if main is not None and (tensor == main or same_shape(index, tensor, main)) else tensor
        if who not in counts:
            counts[who] = ("n", unknown)
            unknown += 1
        return counts[who]

    numel_refs = [count_ref(t) for t in s.numels]
    norm = count_ref(main) if match.attrs.get("reduction", "") == "mean" and main is not None else None
    attrs = OP_SPECS[match.op_type].check_attrs(match.attrs)
    return _Setting(s, proof, match.op_type, attrs, roles, constants, numel_refs, unknown, norm, {}, None,
                    [index.elem_type(v) for v in s.leaves], index.elem_type(match.output))


def _with_params(alg: Algebra, match: Match, frame: _Setting, check: bool = True) -> _Setting:
    """The setting with the kernel's parameters derived from the region, each checked against
    the fused node's own (unless not `check`)."""
    index = alg.index
    setting = replace(frame, params={}, param_exprs=None)
    proof, attrs, roles, constants = setting.spec, setting.attrs, setting.roles, setting.constants
    finite = [c for c in constants if isinstance(c, Fraction)]
    big = Fraction(4) * max([Fraction(1)] + [abs(c) for c in finite]) ** 2

    def at(**given: Fraction | int) -> Fraction | None:
        return _exact_at(setting, given)

    known: dict[str, Fraction] = {}
    for role, (kind, k) in roles:
        if kind == "c" and isinstance(constants[k], Fraction):
            known[role] = constants[k]  # type: ignore[assignment]
    derived = proof.derive(attrs, at, lambda v: relations.snap(v, finite), big, known)
    if check:
        mismatch = _parameter_mismatch(proof.kernel(attrs), derived, index.elem_type(match.output))
        if mismatch is not None:
            raise _Mismatch(mismatch)
    setting.params = derived
    exprs = {name: relations.express(v, finite) for name, v in derived.items()}
    if all(e is not None for e in exprs.values()):
        # indices into the finite constants
        setting.param_exprs = {k: v for k, v in exprs.items() if v is not None}
    return setting


def _parameter_mismatch(kernel: Mapping[str, Fraction], derived: Mapping[str, Fraction],
                        dtype: int | None) -> str | None:
    """How the region's parameters differ from the kernel's, beyond the rounding of an attribute."""
    for name in sorted(set(kernel) | set(derived)):
        if name not in derived:
            return f"the region has no {name} (the fused node's is {float(kernel[name]):.9g})"
        if name not in kernel:
            return f"the region has a {name} of {float(derived[name]):.9g}, the fused node none"
        want, got = kernel[name], derived[name]
        if abs(got - want) > abs(want) * _ATTR_ROUNDING.get(dtype or 0, _ATTR_ROUNDING_DEFAULT):
            return f"the region's {name} is {float(got):.9g}, the fused node's {float(want):.9g}"
    return None


def _static_numel(index, tensor: str) -> int | None:
    vt = index.type_of(tensor)
    if vt is None or vt.shape is None or not all(isinstance(d, int) for d in vt.shape):
        return None
    return math.prod(vt.shape)




# -- exact evaluation ------------------------------------------------------------------------

_COUNT_AT = 4  # the element count exact evaluation takes for an unknown one


def _exact_at(s: _Setting, given: Mapping[str, Fraction | int], with_norm: bool = False) -> Fraction | None:
    """The region's exact value (over norm, unless `with_norm`) with the named inputs given, the
    others 0; None when it is not a finite number there."""
    m = Semantics(ExactBackend())
    leaves = [m.const(0) for _ in s.structure.leaves]
    for role, (kind, k) in s.roles:
        if kind == "in" and role in given:
            leaves[k] = m.const(Fraction(given[role]))
    consts = [_const_ext(m, c) for c in s.constants]
    counts = [m.const(_COUNT_AT) for _ in range(s.unknown_counts)]
    numels = [consts[k] if kind == "c" else counts[k] for kind, k in s.numel_refs]

    def opaque(k: int, x: Ext) -> Ext:
        """The Cast's rounding at this point, as the graph's type does it."""
        if not isinstance(x, Ext) or x.kind != FIN:
            return x
        t = np_type(s.structure.dtypes[k])
        if t is None:
            raise Undetermined("a Cast to a type without a numpy twin")
        with np.errstate(over="ignore"):
            return m.const(float(np.asarray(float(x.real)).astype(t).astype(np.float64)))

    try:
        out, _ = run(s.structure, m, leaves, consts, numels, opaque)
    except (Undetermined, ZeroDivisionError):
        return None
    if out.kind != FIN:
        return None
    norm = Fraction(1)
    if s.norm is not None and not with_norm:
        kind, k = s.norm
        n = s.constants[k] if kind == "c" else Fraction(_COUNT_AT)
        norm = 1 / Fraction(n)
    return out.real / norm


_SCALAR_TRIES = (Fraction(1, 2), Fraction(1, 4), Fraction(2))
_QUICK_RANGE = Fraction(1 << 24)


def _quick_counterexample(alg: Algebra, match: Match, s: _Setting, described: str) -> Verdict | None:
    """A refusal from exact evaluation at a few points (_probe_points), when one of them shows a
    difference the graph's types keep: most wrong matches differ at one of them, and evaluation
    costs far less than a solver call."""
    m = Semantics(ExactBackend())
    consts = [_const_ext(m, c) for c in s.constants]
    counts = [m.const(_COUNT_AT) for _ in range(s.unknown_counts)]
    params = _param_exts(s, m, consts, counts, frozenset())
    for point in _probe_points(s):
        got = _exact_at(s, point, with_norm=True)
        want = _contract_at(m, s, consts, params, point)
        if got is None or want is None or got == want:
            continue
        shown = _shown_at(alg, match, s, {r: float(x) for r, x in point.items()})
        if shown is not None:
            return Verdict(False, f"differs from {described}{shown}")
    return None


def _shown_at(alg: Algebra, match: Match, s: _Setting, point: Mapping[str, float]) -> str | None:
    """" at <point>: the graph gives .., the fused op .. (in <dtype>)" where the graph's own types
    show a difference at `point` (lowering.proof.reproduce), else None."""
    from .reproduce import reproduce

    shown = reproduce(alg, match, s.structure, point, [float(_COUNT_AT)] * s.unknown_counts, s.roles)
    if shown is None:
        return None
    g, f, dtype = shown
    at = ", ".join(f"{r}={_fmt(x)}" for r, x in point.items())
    return f" at {at}: the graph gives {_fmt(g)}, the fused op {_fmt(f)} (in {dtype_name(dtype)})"


_ADDITIVE = frozenset({"Add", "Sub", "Sum"})
_SMALL_EXPONENTS = range(2, 66, 2)  # a counterexample is sought with inputs |c| * 2^-e
_NUDGE = Fraction(1, 256)  # a sum off by this much, relatively: any amount shows a dependence exactly


def _lost_significance(alg: Algebra, match: Match, s: _Setting, described: str) -> Verdict | None:
    """A refusal when the region adds constants and takes them away again: its exact result is
    the same with their additive uses read as 0 (each constant on its own, then all together:
    (x + 64) - 32 - 32), yet it moves when one such sum is off by a little, as its rounding makes
    it (Sign(|x| + 1) is not moved: nothing is lost there). Both at every point _probe_points
    gives; exact evaluation of a piecewise rational function can only miss a dependence, never
    invent one."""
    uses = [(k, i, j) for k, (op, _, refs) in enumerate(s.structure.ops) if op in _ADDITIVE
            for i, (kind, j) in enumerate(refs)
            if kind == "c" and isinstance(s.constants[j], Fraction) and s.constants[j] != 0]
    additive = sorted({j for _, _, j in uses})
    points = _probe_points(s)
    if not additive or not points:
        return None
    exact = [_exact_at(s, p) for p in points]
    if any(e is None for e in exact):
        return None

    def moves(changed: list[tuple[int, int]], value: Callable[[Fraction], Fraction]) -> bool:
        return any(e != _exact_at(_with_uses(s, changed, value), p) for e, p in zip(exact, points))

    for dropped in [[j] for j in additive] + ([additive] if len(additive) > 1 else []):
        mine = [(k, i) for k, i, j in uses if j in dropped]
        if moves(mine, lambda c: Fraction(0)):
            continue
        if not any(moves([use], lambda c: c * (1 + _NUDGE)) for use in mine):
            continue
        shown = ", ".join(_fmt(float(s.constants[j])) for j in dropped)
        witness = _significance_witness(alg, match, s, [abs(Fraction(s.constants[j])) for j in dropped])
        return Verdict(False, f"differs from {described}{witness}: it adds {shown} and takes it away again, and "
                              f"the graph's rounding of that sum drops what lies below its last digit")
    return None


def _with_uses(s: _Setting, uses: list[tuple[int, int]], value: Callable[[Fraction], Fraction]) -> _Setting:
    """`s` with operand i of op k, for each (k, i) of `uses`, reading `value` of its constant."""
    ops = list(s.structure.ops)
    constants = list(s.constants)
    for k, i in uses:
        op, key, refs = ops[k]
        constants.append(value(Fraction(s.constants[refs[i][1]])))
        ops[k] = (op, key, refs[:i] + (("c", len(constants) - 1),) + refs[i + 1:])
    return replace(s, structure=replace(s.structure, ops=ops), constants=constants)


def _probe_roles(s: _Setting) -> tuple[list[str], dict[str, Fraction] | None]:
    """The tensor inputs a probe sets (two at most), and values for the others (dout, runtime
    scalars) inside the op's domain; None for those when the domain admits none tried."""
    tensors = [role for role, (kind, _) in s.roles if kind == "in" and role not in s.spec.finite][:2]
    others = [role for role, (kind, _) in s.roles if kind in ("in", "free") and role not in tensors]
    return tensors, _in_domain(Semantics(ExactBackend()), s, others)


def _probe_points(s: _Setting) -> list[dict[str, Fraction]]:
    """Each tensor input on its own at 0, +-1, the constants and their halves and doubles, the
    scalars at values inside the op's domain; none when the domain admits none of those."""
    tensors, fixed = _probe_roles(s)
    if fixed is None:
        return []
    finite = sorted({abs(c) for c in s.constants if isinstance(c, Fraction) and c != 0})[:6]
    values = [Fraction(0), Fraction(1), Fraction(-1), Fraction(-3, 2)]
    for c in finite:
        values += [c, -c, c / 2, -3 * c / 2, 2 * c]
    # moderate points only: near the float range the overflow question decides, with its excuses
    values = [v for v in values if abs(v) <= _QUICK_RANGE]
    leaf_of = {role: k for role, (kind, k) in s.roles if kind == "in"}
    points = []
    for role in tensors:
        for v in values:
            # roles that read one value (var and delta both the same tensor) take one value
            at_leaf = {leaf_of[r]: Fraction(0) for r in tensors}
            at_leaf[leaf_of[role]] = v
            points.append({**fixed, **{r: at_leaf[leaf_of[r]] for r in tensors}})
    return points


def _significance_witness(alg: Algebra, match: Match, s: _Setting, sizes: list[Fraction]) -> str:
    """Where the graph, in its own types, shows the loss: one tensor input far below a dropped
    constant (the others 0, the scalars inside the domain); "" where no such point shows it."""
    tensors, fixed = _probe_roles(s)
    scalars = {r: float(v) for r, v in (fixed or {}).items()}
    for size in sizes:
        for e in _SMALL_EXPONENTS:
            for role in tensors:
                point = {**dict.fromkeys(tensors, 0.0), **scalars, role: float(size) * 2.0**-e}
                shown = _shown_at(alg, match, s, point)
                if shown is not None:
                    return shown
    return ""


def _in_domain(m: Semantics, s: _Setting, roles: list[str]) -> dict[str, Fraction] | None:
    """Values for `roles` (dout, runtime scalars) that the op's domain admits (which binds
    runtime inputs only: with none, any constants are what they are)."""
    if not roles:
        return {}
    consts = {role: s.constants[k] for role, (kind, k) in s.roles if kind == "c"}
    for a in _SCALAR_TRIES:
        for b in _SCALAR_TRIES:
            point = {r: (a if k == 0 else b) for k, r in enumerate(roles)}
            inputs = {role: _const_ext(m, consts[role]) if role in consts else m.const(point.get(role, Fraction(0)))
                      for role, _ in s.roles}
            if s.spec.domain(m, inputs, s.attrs, s.out_dtype) is True:
                return point
    return None


def _contract_at(m: Semantics, s: _Setting, consts: list[Any], params: dict[str, Any],
                 point: Mapping[str, Fraction]) -> Fraction | None:
    inputs = {}
    for role, (kind, k) in s.roles:
        inputs[role] = consts[k] if kind == "c" else m.const(point.get(role, Fraction(0)))
    try:
        out = s.spec.contract(m, inputs, params, s.attrs)
    except ZeroDivisionError:
        return None
    return out.real if out.kind == FIN else None


def _const_ext(m: Semantics, c: Fraction | float | bool) -> Any:
    if isinstance(c, bool):
        return c
    return m.const(c)


# -- the queries -----------------------------------------------------------------------------

@dataclass
class _Encoded:
    solver: Any
    m: Semantics
    leaves: list[Ext]
    counts: list[Any]
    consts: list[Any]
    region: Ext
    contract: Ext
    exact_contract: Ext | None = None
    contract_trace: list[Ext] = field(default_factory=list)  # the exact contract's arithmetic values
    tie: Ext | None = None  # the contract with its comparison inclusive
    overflows: dict[int, Any] = field(default_factory=dict)  # per region op: where its value overflows its type
    live: list[Any] = field(default_factory=list)  # per region op: where the output depends on its value

    def differs(self) -> Any:
        """The region differs from the contract (from both forms of it, where it has two)."""
        found = self.m.differs(self.region, self.contract)
        return found if self.tie is None else self.m.b.and_(found, self.m.differs(self.region, self.tie))


def _encode(s: _Setting, generic: frozenset[int], free_kinds: bool, saturate: bool,
            within_range: bool = True) -> _Encoded:
    import z3

    from .z3_backend import Z3Backend

    # a context of its own per query: z3's model, and so a refusal's counterexample, would
    # otherwise depend on every query this process asked before (and on which process asked it)
    ctx = z3.Context()
    b = Z3Backend(ctx)
    m = Semantics(b)
    solver = z3.SolverFor("QF_NRA", ctx=ctx)
    solver.set("timeout", TIMEOUT_MS)
    finite_roles = set(s.spec.finite)
    leaves: list[Ext] = []
    role_of_leaf = {k: role for role, (kind, k) in s.roles if kind == "in"}
    for k, _name in enumerate(s.structure.leaves):
        real = b.real(f"x{k}")
        if free_kinds and role_of_leaf.get(k) not in finite_roles:
            kind = b.kind(f"k{k}")
            solver.add(_is_kind(kind))
        else:
            kind = FIN
        leaves.append(Ext(kind, real))
        top = float_max(s.leaf_dtypes[k])
        if top is not None:  # a finite input is a value of its type
            solver.add(b.or_(b.not_(m.finite(leaves[-1])), b.and_(real <= b.num(top), real >= b.num(-top))))
    finite_values = [c for c in s.constants if isinstance(c, Fraction)]
    consts: list[Any] = []
    symbols = []
    for j, c in enumerate(s.constants):
        if j in generic and isinstance(c, Fraction):
            sym = b.real(f"c{j}")
            symbols.append(sym)
            consts.append(Ext(FIN, sym))
        else:
            consts.append(_const_ext(m, c))
            if isinstance(c, Fraction):
                symbols.append(b.num(c))
    if generic:
        relate = relations.constraints if s.fine else relations.sign_constraints
        solver.add(*[c for c in relate(symbols, finite_values) if not z3.is_true(c)])
    counts = []
    for j in range(s.unknown_counts):
        n = b.real(f"n{j}")
        solver.add(n >= 1)
        counts.append(Ext(FIN, n))
    numels = [consts[k] if kind == "c" else counts[k] for kind, k in s.numel_refs]
    opaque_n = [0]

    def opaque(k: int, x: Any) -> Ext:
        """A narrowing Cast of x: an unknown value with only what every rounding to the type
        guarantees (lowering.proof.rounding)."""
        opaque_n[0] += 1
        v = Ext(b.kind(f"cast{k}_{opaque_n[0]}_kind"), b.real(f"cast{k}_{opaque_n[0]}"))
        solver.add(_is_kind(v.kind), *rounding.bounds(m, x, v, s.structure.dtypes[k]))
        return v

    region, values = run(s.structure, Semantics(b, saturate), leaves, consts, numels, opaque)
    overflows = {}
    if not saturate:
        for k, ((op, _, _), value, dtype) in enumerate(zip(s.structure.ops, values, s.structure.dtypes)):
            top = overflow_at(dtype)
            if op in OVERFLOWING and isinstance(value, Ext) and top is not None:
                bound = b.num(top)
                overflows[k] = b.and_(m.finite(value), b.not_(
                    b.and_(b.lt(value.real, bound), b.lt(b.neg(bound), value.real))))
    live = liveness(s.structure, b, values) if not saturate else []
    if not saturate and within_range:
        # the real and non-finite questions are asked where no value the result depends on
        # overflows its type; where one does, the overflow question decides (a value no output
        # depends on, the branch a Where does not take, may overflow: the questions cover that)
        solver.add(*[b.not_(b.and_(live[k], o)) for k, o in overflows.items()])
    inputs: dict[str, Any] = {}
    dummies: dict[str, Any] = {}
    for role, (kind, k) in s.roles:
        if kind == "in":
            inputs[role] = leaves[k]
        elif kind == "c":
            inputs[role] = consts[k]
            dummies[role] = Ext(FIN, b.real(f"unused_{role}"))
        else:
            inputs[role] = Ext(b.kind(f"k_{role}") if free_kinds and role not in finite_roles else FIN,
                               b.real(f"free_{role}"))
            if not isinstance(inputs[role].kind, int):
                solver.add(_is_kind(inputs[role].kind))
    params = _param_exts(s, m, consts, counts, generic)
    m.trace = []
    contract = s.spec.contract(m, inputs, params, s.attrs)
    trace, m.trace = m.trace, None
    # where the contract compares at a breakpoint, the region may take either side there (the
    # two sides meet up to the rounding of its constants): the other side's value
    tie = s.spec.contract(m, inputs, {**params, "inclusive": True}, s.attrs) if s.spec.ties else None
    exact_contract = None
    if saturate:  # the kernel computes in float32 and rounds its result to the output type once
        exact_contract = contract
        kernel = Semantics(b, saturate=True, bound=overflow_at(onnx.TensorProto.FLOAT))
        contract = kernel.limit(s.spec.contract(kernel, inputs, params, s.attrs), overflow_at(s.out_dtype))
    # the domain binds runtime inputs only: a constant input is what it is
    domain = s.spec.domain(m, {**inputs, **dummies}, s.attrs, s.out_dtype)
    if domain is not True:
        solver.add(domain)
    return _Encoded(solver, m, leaves, counts, consts, region, contract, exact_contract, trace, tie, overflows,
                    live)


_VISIBLE = Fraction(1, 1 << 16)  # a relative difference below this is a rounding, not a different function
_UNSEEN = "shows there"


def _differs_visibly(s: _Setting, generic: frozenset[int]) -> bool:
    """Whether region and contract differ somewhere by more than a relative _VISIBLE (or in kind)."""
    import z3

    e = _encode(s, generic, free_kinds=False, saturate=False)
    b, m = e.m.b, e.m
    gap = e.region.real - e.contract.real
    size = z3.If(z3.Abs(e.region.real) > z3.Abs(e.contract.real), z3.Abs(e.region.real), z3.Abs(e.contract.real))
    visible = b.or_(b.not_(b.eq(e.region.kind, e.contract.kind)),
                    b.and_(m.finite(e.region), z3.Abs(gap) > b.num(_VISIBLE) * size))
    e.solver.add(e.differs(), visible)
    return e.solver.check() != z3.unsat


def _is_kind(k: Any) -> Any:
    import z3

    return z3.Or(k == FIN, k == PINF, k == NINF, k == NAN)


def _param_exts(s: _Setting, m: Semantics, consts: list[Any], counts: list[Any],
                generic: frozenset[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    finite_idx = [j for j, c in enumerate(s.constants) if isinstance(c, Fraction)]
    for name, value in s.params.items():
        if generic and s.param_exprs is not None:  # in terms of the open constants
            sign, factors = s.param_exprs[name]
            e = m.const(sign)
            for i, exp in factors:
                c = consts[finite_idx[i]]
                e = m.mul(e, c) if exp > 0 else m.div(e, c)
            out[name] = e
        else:
            out[name] = m.const(value)
    if s.norm is not None:
        kind, k = s.norm
        out["norm"] = m.div(m.const(1), consts[k] if kind == "c" else counts[k])
    else:
        out["norm"] = m.const(1)
    return out


def _decide(alg: Algebra, match: Match, s: _Setting, assume_finite: bool, generic: frozenset[int],
            described: str) -> Verdict:
    import z3

    caveats: list[str] = []
    if s.spec.domain_text and any(kind != "c" for role, (kind, _) in s.roles if role in s.spec.finite):
        caveats.append(f"proved for runtime scalars with {s.spec.domain_text}, the op's domain")
    # 1. the reals (the non-finite variants of an op agree there)
    e = _encode(s, generic, free_kinds=False, saturate=False)
    e.solver.add(e.differs())
    found = _check_reals(e)
    if found != z3.unsat:
        refusal = _refusal(alg, match, s, e, found, generic, described, "")
        if generic or found != z3.sat or not refusal.reason.endswith(_UNSEEN) or _differs_visibly(s, generic):
            return refusal
        # they differ, but nowhere by more than a rounding of the graph's type (a clamp at the
        # largest float where x exceeds it by a few units): rounding, which evaluation bounds
        caveats.append(f"equal to the graph up to a relative {float(_VISIBLE):.3g} ({refusal.reason})")
    # 2. non-finite inputs, with the op's variants for them in turn
    first: Verdict | None = None
    for variant in _variants(s):
        tried = replace(s, attrs={**s.attrs, **variant})
        e = _encode(tried, generic, free_kinds=True, saturate=False)
        kinds = [x.kind for x in e.leaves if not isinstance(x.kind, int)]
        if kinds:
            e.solver.add(z3.Or(*[k != 0 for k in kinds]), e.differs())
            found = _check_case_split(e)
            if found != z3.unsat:
                if first is None:
                    first = _refusal(alg, match, tried, e, found, generic, described, " (with a non-finite input)")
                continue
        overflow = _overflow(alg, match, tried, assume_finite, generic, described)
        if overflow is not None:
            return overflow
        return Verdict(True, caveats=caveats, attrs=variant)
    assert first is not None
    if not assume_finite:
        return first
    overflow = _overflow(alg, match, s, assume_finite, generic, described)
    if overflow is not None:
        return overflow
    return Verdict(True, caveats=caveats + [f"fused under assume_finite: {first.reason}"], waived=True)


_FIRST_TRY_MS = 1000  # a procedure tried first gets this long, then the general solver decides


def _check_reals(e: _Encoded) -> Any:
    """The solver's answer to a question over the reals, tried first by nlsat, z3's complete
    procedure for polynomial real arithmetic, on its own: z3's default for the logic starts with
    its SMT core, which on these queries (products of open constants and inputs, case splits on
    comparisons) takes two to three times as long, and several times as long on the slowest."""
    import z3

    return _check_first(e, z3.Tactic("qfnra-nlsat", ctx=e.solver.ctx))


def _check_case_split(e: _Encoded) -> Any:
    """The solver's answer, tried first by z3's SMT core after simplification: the non-finite
    question is mostly a split over the kinds of the inputs, which that core decides several
    times faster than the nonlinear-arithmetic solver."""
    import z3

    return _check_first(e, z3.Then("simplify", "propagate-values", "solve-eqs", "smt", ctx=e.solver.ctx))


def _check_first(e: _Encoded, first: Any) -> Any:
    """`e`'s query decided by the tactic `first`, or, where it gives no answer within
    _FIRST_TRY_MS, by the general solver. Either answer is a decision (z3 returns sat or unsat
    only when it is so), and `e.solver` is then the one that gave it, whose model a refusal reads."""
    import z3

    fast = first.solver()
    fast.set("timeout", _FIRST_TRY_MS)
    fast.add(*e.solver.assertions())
    found = fast.check()
    if found != z3.unknown:
        e.solver = fast
        return found
    return e.solver.check()


def _variants(s: _Setting) -> list[dict[str, object]]:
    """The attribute values to try for non-finite inputs: the match's own first."""
    if s.spec.nonfinite is None:
        return [{}]
    name, values = s.spec.nonfinite
    own = s.attrs.get(name)
    return [{}] + [{name: v} for v in values if v != own]


def _overflow(alg: Algebra, match: Match, s: _Setting, assume_finite: bool, generic: frozenset[int],
              described: str) -> Verdict | None:
    """3. A refusal when the graph and the kernel, each rounding overflows to +-inf, differ at
    inputs none of which is near its type's range, where every value the contract computes is
    not near the result type's range either: an overflow there comes from a product of
    input-dependent terms or a square, not from a constant scaling in another order. The inputs
    may be +-inf or NaN too (questions 1 and 2 leave out every point where a value the result
    depends on overflows), unless `assume_finite` waives them."""
    import z3

    out_max = float_max(s.out_dtype)
    if out_max is None:
        return None
    unshown = bounds.may_overflow(s.structure, *_boxes(s, generic))
    if not unshown:
        return None
    free_kinds = not assume_finite
    # where no value the result depends on overflows, the region is what the first two questions
    # proved equal to the contract, and so is the kernel, whose values stay inside the range
    # there: a cheaper query than comparing the two with overflow, and enough for most regions.
    # The values bounds show to stay inside their range need not be asked about.
    if not _live_value_may_overflow(s, generic, free_kinds, among=unshown):
        return None
    e = _encode(s, generic, free_kinds=free_kinds, saturate=True)
    assert e.exact_contract is not None
    conds = [e.differs(), *_away_from_range(e, s, e.contract_trace + [e.exact_contract])]
    if assume_finite:
        conds.append(e.m.finite(e.region))
    e.solver.add(*[c for c in conds if c is not True])
    found = _check_case_split(e)
    if found == z3.unsat:
        return None
    return _refusal(alg, match, s, e, found, generic, described, " (an intermediate overflows)", overflow=True)


def _live_value_may_overflow(s: _Setting, generic: frozenset[int], free_kinds: bool,
                             contract_in_range: bool = True, among: Collection[int] | None = None) -> bool:
    """Whether the solver finds inputs away from their types' ranges (and, with
    `contract_in_range`, every value the contract computes away from the result's range) where
    a value the result depends on (of the ops `among`, when given) overflows; an undecided
    query counts as found."""
    import z3

    e = _encode(s, generic, free_kinds=free_kinds, saturate=False, within_range=False)
    b = e.m.b
    overflows = b.or_(*[b.and_(e.live[k], o) for k, o in e.overflows.items() if among is None or k in among])
    if overflows is False:
        return False
    contract_values = e.contract_trace + [e.contract] if contract_in_range else []
    e.solver.add(*[c for c in _away_from_range(e, s, contract_values) if c is not True], overflows)
    return _check_case_split(e) != z3.unsat


def _boxes(s: _Setting, generic: frozenset[int]) -> tuple[list, list, list]:
    """For lowering.proof.bounds: the leaves' intervals (inside their types' ranges by the margin,
    _near, as the solver's queries have them), the constants' (an open one within its relations)
    and the constant each element count is (None: unknown)."""
    leaves: list[bounds.Interval | None] = []
    for dtype in s.leaf_dtypes:
        near = _near(dtype)
        leaves.append(None if near is None else (-near, near))
    consts: list[bounds.Box] = []
    for j, c in enumerate(s.constants):
        if isinstance(c, bool):
            consts.append(bounds.BOOL)
        elif not isinstance(c, Fraction):
            consts.append(None)  # +-inf or NaN: never a finite value
        else:
            consts.append(relations.box(c, s.fine) if j in generic else (c, c))
    numels = [k if kind == "c" else None for kind, k in s.numel_refs]
    return leaves, consts, numels


def _away_from_range(e: _Encoded, s: _Setting, contract_values: list[Ext]) -> list[Any]:
    """The inputs, and the values the contract computes, more than the margin inside their ranges."""
    m = e.m
    conds: list[Any] = []
    for x, dtype in zip(e.leaves, s.leaf_dtypes):
        near = _near(dtype)
        if near is not None:
            conds += [x.real < m.b.num(near), x.real > -m.b.num(near)]
    if contract_values:
        near = _near(s.out_dtype)
        assert near is not None  # the overflow question is asked of float results only
        near_out = m.b.num(near)
        for value in contract_values:
            conds.append(m.b.or_(m.b.not_(m.finite(value)), m.b.and_(m.b.lt(value.real, near_out),
                                                                       m.b.lt(m.b.neg(near_out), value.real))))
    return conds


def _near(dtype: int | None) -> Fraction | None:
    """Where a value of `dtype` is near its range: its largest finite value over the margin (the
    solver's queries and lowering.proof.bounds read the same limit)."""
    top = float_max(dtype)
    return None if top is None else top / OVERFLOW_MARGIN.get(dtype or 0, Fraction(2) ** 20)


# -- refusals --------------------------------------------------------------------------------

def _refusal(alg: Algebra, match: Match, s: _Setting, e: _Encoded, found: Any, generic: frozenset[int], described: str,
             where: str, overflow: bool = False) -> Verdict:
    import z3

    if found == z3.unknown:
        return Verdict(False, f"is not proved equal to {described}: the solver did not decide within "
                              f"{TIMEOUT_MS / 1000:g} s{where}", undecided=True)
    if generic:  # the relations alone do not decide: the instance's own constants will
        return Verdict(False, "generic")
    model = e.solver.model()
    point = {role: _model_value(model, e.leaves[k]) for role, (kind, k) in s.roles if kind == "in"}
    counts = [_model_real(model, n.real) for n in e.counts]
    graph = _model_value(model, e.region)
    fused = _model_value(model, e.contract)
    at = ", ".join(f"{role}={_fmt(v)}" for role, v in point.items())
    if counts:
        at += ", " + ", ".join(f"numel={_fmt(n)}" for n in counts)
    if overflow:
        return Verdict(False, f"differs from {described} at {at}{where}: the graph overflows to {_fmt(graph)} where "
                              f"the fused op gives {_fmt(fused)}")
    from .reproduce import reproduce
    shown = reproduce(alg, match, s.structure, point, counts, s.roles)
    if shown is not None:
        g, f, dtype = shown
        return Verdict(False, f"differs from {described} at {at}{where}: the graph gives {_fmt(g)}, the fused op "
                              f"{_fmt(f)} (in {dtype_name(dtype)})")
    return Verdict(False, f"is not proved equal to {described}: over the reals they differ at {at}{where} (the graph "
                          f"{_fmt(graph)}, the fused op {_fmt(fused)}), by less than "
                          f"{dtype_name(s.out_dtype)} shows there")


def _model_real(model: Any, term: Any) -> float:
    import z3

    v = model.eval(term, model_completion=True)
    if z3.is_rational_value(v):
        return float(Fraction(v.numerator_as_long(), v.denominator_as_long()))
    if z3.is_algebraic_value(v):
        approx = v.approx(30)
        return float(Fraction(approx.numerator_as_long(), approx.denominator_as_long()))
    return float("nan")


def _model_value(model: Any, x: Ext) -> float:
    kind = x.kind if isinstance(x.kind, int) else round(_model_real(model, x.kind))
    if kind == NAN:
        return float("nan")
    if kind == PINF:
        return float("inf")
    if kind == NINF:
        return float("-inf")
    return _model_real(model, x.real) if not isinstance(x.real, (int, Fraction)) else float(x.real)


def _fmt(v: float) -> str:
    return f"{v:.9g}"
