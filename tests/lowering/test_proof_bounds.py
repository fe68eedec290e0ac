"""lowering.proof.bounds: the overflow question's first query answered without the solver.

Bounds may only ever say "this value cannot overflow where the result depends on it" when that is
so: each claim the pass makes on the mutation fuzzer's spellings and mutants (overflowing
intermediates among them), of each op bounds leave out of the solver's query, is checked here
against the solver's own query about that op, asked without the contract's conditions (a stronger
question than the pass asks). And the cases bounds must leave to the solver: a
product of two inputs, a square in the branch Where does not narrow, a divisor that may be 0, a
comparison with a computed bound, the finite results of +-inf operands, a divisor bounded only
from above, a narrowing Cast as the proof rounds it.
"""

from __future__ import annotations

from fractions import Fraction

import onnx
import pytest
from mutations import generate, judge

from lowering.proof import bounds, prove
from lowering.proof.structure import OVERFLOWING, Structure, overflow_at

F32 = onnx.TensorProto.FLOAT
F16 = onnx.TensorProto.FLOAT16
NEAR32 = Fraction(2) ** 108  # float32's largest value over the 2^20 margin, about
NEAR16 = Fraction(4096)
BOX = (Fraction(1, 256), Fraction(256))  # a constant left open, moderate


def _s(ops: list[tuple], leaves: int, dtype: int = F32) -> Structure:
    """A structure whose ops are (op, input refs), all of `dtype`, its output the last op."""
    return Structure([(op, (), tuple(refs)) for op, refs in ops], ("v", len(ops) - 1),
                     [f"in{k}" for k in range(leaves)], [], [], [dtype] * len(ops))


def _shown(s: Structure, constants: list, near: Fraction = NEAR32, numels: list | None = None) -> bool:
    return not _unshown(s, constants, near, numels)


def _unshown(s: Structure, constants: list, near: Fraction = NEAR32, numels: list | None = None) -> set[int]:
    return bounds.may_overflow(s, [(-near, near)] * len(s.leaves), constants, numels or [])


X, L, D, B = ("in", 0), ("in", 1), ("in", 2), ("c", 0)

# SmoothL1's where-chain: x = p - l, g = dout * norm, Where(|x| < beta, g * x / beta, g * sign(x))
WHERE_CHAIN = [("Sub", [X, L]), ("Mul", [D, ("c", 1)]), ("Abs", [("v", 0)]), ("Less", [("v", 2), B]),
               ("Mul", [("v", 1), ("v", 0)]), ("Div", [("v", 4), B]), ("Sign", [("v", 0)]),
               ("Mul", [("v", 1), ("v", 6)]), ("Where", [("v", 3), ("v", 5), ("v", 7)])]


def test_the_where_chain_cannot_overflow_with_its_constants_or_open() -> None:
    s = _s(WHERE_CHAIN, 3)
    assert _shown(s, [(Fraction(1, 2),) * 2, (Fraction(1, 64),) * 2])
    # beta open over 2^16: g * x / beta is bounded by |g| through beta's own monomial
    assert _shown(s, [BOX, BOX])


def test_only_the_values_bounds_cannot_bound_are_left_to_the_solver() -> None:
    # g = dout * c1 * c2 with both open: g * x, where |x| < beta, may reach the range over the
    # boxes (only the result g * x / beta keeps it inside); g, g * x / beta and g * sign(x) cannot
    ops = [("Sub", [X, L]), ("Mul", [D, ("c", 1)]), ("Mul", [("v", 1), ("c", 2)]), ("Abs", [("v", 0)]),
           ("Less", [("v", 3), B]), ("Mul", [("v", 2), ("v", 0)]), ("Div", [("v", 5), B]), ("Sign", [("v", 0)]),
           ("Mul", [("v", 2), ("v", 7)]), ("Where", [("v", 4), ("v", 6), ("v", 8)])]
    assert _unshown(_s(ops, 3), [BOX, BOX, BOX]) == {5}
    assert _unshown(_s(ops, 3), [(Fraction(1, 2),) * 2, (Fraction(1, 64),) * 2, (Fraction(3),) * 2]) == set()


def test_the_branch_where_does_not_narrow_still_counts() -> None:
    # Where(|x| < beta, g * sign(x), x * x): the square is taken where |x| >= beta
    ops = [("Sub", [X, L]), ("Abs", [("v", 0)]), ("Less", [("v", 1), B]), ("Sign", [("v", 0)]),
           ("Mul", [D, ("v", 3)]), ("Mul", [("v", 0), ("v", 0)]), ("Where", [("v", 2), ("v", 4), ("v", 5)])]
    assert not _shown(_s(ops, 3), [(Fraction(1),) * 2])
    swapped = ops[:-1] + [("Where", [("v", 2), ("v", 5), ("v", 4)])]  # the square only where |x| < 1
    assert _shown(_s(swapped, 3), [(Fraction(1),) * 2])


def test_products_of_inputs_a_divisor_that_may_be_zero_and_computed_bounds_are_left_to_the_solver() -> None:
    # x * relu(|x| - b): a product of two input-dependent terms
    assert not _shown(_s([("Abs", [X]), ("Sub", [("v", 0), B]), ("Relu", [("v", 1)]), ("Mul", [X, ("v", 2)])], 1),
                      [(Fraction(1),) * 2])
    # x / (1 + alpha * l2) with a runtime alpha: the divisor's interval holds 0
    assert not _shown(_s([("Mul", [L, D]), ("Add", [("v", 0), B]), ("Div", [X, ("v", 1)])], 3), [(Fraction(1),) * 2])
    # Where(|x| < t, x * x, 0) with t a runtime input: t may be +inf, so |x| < t bounds nothing
    ops = [("Abs", [X]), ("Less", [("v", 0), L]), ("Mul", [X, X]), ("Sub", [X, X]), ("Where", [("v", 1), ("v", 2),
                                                                                                   ("v", 3)])]
    assert not _shown(_s(ops, 2), [])


def test_a_float16_scaling_near_its_range_is_left_to_the_solver() -> None:
    scaled = _s([("Mul", [X, B])], 1, F16)
    assert _shown(scaled, [(Fraction(8),) * 2], NEAR16)
    assert not _shown(scaled, [(Fraction(16),) * 2], NEAR16)  # 4096 * 16 reaches 65520


def test_an_unknown_count_bounds_a_mean_but_not_a_multiple() -> None:
    mean = _s([("Div", [X, ("n", 0)])], 1)
    assert _shown(mean, [], numels=[None])
    assert not _shown(_s([("Mul", [X, ("n", 0)])], 1), [], numels=[None])


def test_non_finite_constants_have_no_finite_values() -> None:
    # x * inf is never finite, so never an overflow; Where(c, inf, x) picks x's bounds
    assert _shown(_s([("Mul", [X, B])], 1), [None])
    ops = [("Less", [X, ("c", 1)]), ("Where", [("v", 0), B, X]), ("Mul", [("v", 1), ("c", 1)])]
    assert _shown(_s(ops, 1), [None, (Fraction(2),) * 2])


def test_finite_results_of_non_finite_operands_count() -> None:
    inf = None  # a constant +-inf has no finite values
    # x / inf is 0 and Sign(inf) is 1: finite, so what they feed can overflow
    for first in (("Div", [X, B]), ("Reciprocal", [B]), ("Sign", [B])):
        ops = [first, ("Add", [("v", 0), L]), ("Mul", [("v", 1), D])]
        assert not _shown(_s(ops, 3), [inf]), first[0]
    # in the branch where x > 2^120, a finite x of the box has no value, but x = +inf does
    ops = [("Greater", [X, B]), ("Div", [L, X]), ("Add", [("v", 1), L]), ("Mul", [("v", 2), D]), ("Sub", [L, L]),
           ("Where", [("v", 0), ("v", 3), ("v", 4)])]
    assert not _shown(_s(ops, 3), [(Fraction(2) ** 120,) * 2])


def test_a_divisor_narrowed_by_a_comparison_is_bounded_above_only() -> None:
    # Where(|c0| < c1, x / c0, 0): |c0| < 1 bounds c0 from above, not x / c0 (c0 = 2^-30)
    ops = [("Abs", [B]), ("Less", [("v", 0), ("c", 1)]), ("Div", [X, B]), ("Sub", [X, X]),
           ("Where", [("v", 1), ("v", 2), ("v", 3)])]
    assert not _shown(_s(ops, 1), [(Fraction(1, 2**30),) * 2, (Fraction(1),) * 2])


def test_a_narrowing_cast_is_bounded_as_the_proof_rounds() -> None:
    # the proof's rounding of a float16 just above half its smallest subnormal may give a little
    # more than twice the value, and a product of constants of 2^152 takes that past the range
    half_sub, rel = Fraction(1, 2**25), Fraction(1, 2**11)
    c = half_sub * (1 + rel / 2)
    c1 = Fraction(2) ** 127
    c2 = overflow_at(F32) / (2 * c) * (1 - Fraction(1, 2**20)) / c1
    ops = [("Greater", [X, ("c", 0)]), ("LessOrEqual", [X, ("c", 1)]), ("And", [("v", 0), ("v", 1)]),
           ("Cast", [X]), ("Mul", [("v", 3), ("c", 2)]), ("Mul", [("v", 4), ("c", 3)]), ("Sub", [X, X]),
           ("Where", [("v", 2), ("v", 5), ("v", 6)])]
    s = _s(ops, 1)
    s.dtypes[3] = F16
    s.narrowing = {3}
    assert not _shown(s, [(Fraction(0),) * 2, (c, c), (c1, c1), (c2, c2)])


@pytest.fixture(scope="module")
def claims() -> list[tuple[str, bool]]:
    """Every claim bounds made while the pass judged the fuzzer's cases (an op that cannot
    overflow where the result depends on it), with the solver's answer to the same question
    (True: no overflow)."""
    found: list[tuple[str, bool]] = []
    unshown = bounds.may_overflow

    def checked(s, leaves, constants, numels) -> set[int]:
        left = unshown(s, leaves, constants, numels)
        for k, (op, _, _) in enumerate(s.ops):
            if op in OVERFLOWING and overflow_at(s.dtypes[k]) is not None and k not in left:
                found.append((f"op {k} of {[op for op, _, _ in s.ops]} constants {constants}",
                              _solver_says_no_overflow(s, k)))
        return left

    setting: dict[int, prove._Setting] = {}
    overflow = prove._overflow

    def remembering(alg, match, s, assume_finite, generic, described):
        setting[id(s.structure)] = (s, generic, assume_finite)
        return overflow(alg, match, s, assume_finite, generic, described)

    def _solver_says_no_overflow(structure, k: int) -> bool:
        s, generic, assume_finite = setting[id(structure)]
        return not prove._live_value_may_overflow(s, generic, not assume_finite, contract_in_range=False, among={k})

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bounds, "may_overflow", checked)
        mp.setattr(prove, "_overflow", remembering)
        prove.clear_cache()
        try:
            for case in generate(7, 48, 16):
                judge(case)
        finally:
            prove.clear_cache()
    return found


def test_every_claim_on_the_fuzzers_cases_is_the_solvers(claims) -> None:
    assert len(claims) >= 8, "the fuzzer's cases gave bounds too little to check"
    wrong = [what for what, solver_agrees in claims if not solver_agrees]
    assert not wrong, "bounds claimed no overflow where the solver finds one (seed 7):\n" + "\n".join(wrong)
