"""The mutation fuzzer of tests/lowering/mutations.py at a larger budget: how the pass's proofs
(lowering.proof) fare against mutants of the contracts' spellings.

Each mutant is classified by onnxruntime against the fused op's float64 reference (differs, with a
witness input; differs only at +-inf/NaN; equal; or discarded when the difference it was meant to
have does not show beyond the precision standard), then fused by the pass. Prints per mutation
operator: mutants, differing (those at +-inf/NaN only included), refused (of the differing), equal,
accepted (of the equal: the region fused, or the part of it a mutation wraps), wrongly fused (a
fused node that differs from the unfused mutant at its witness), wrongly refused (an equal mutant
with nothing fused; a +-inf/NaN-only one not fused under assume_finite), discarded, and the
milliseconds the pass took per mutant (its proofs, cached per structure within one run). Then one
line per wrong verdict with the graph's description and the witness. Exits 1 if any mutant is
wrongly fused.

Usage: python benchmarks/proof_fuzz.py [--budget 300] [--seed 0] [--spellings 40]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "lowering"))

from mutations import OPERATORS, Case, Outcome, generate, judge  # noqa: E402

COLUMNS = ("mutants", "differing", "refused", "equal", "accepted", "wrongly fused", "wrongly refused", "discarded")


@dataclass
class Row:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COLUMNS, 0))
    seconds: float = 0.0


def tally(cases: list[Case]) -> tuple[dict[str, Row], list[str]]:
    """Rows by operator (and the unmutated spellings), and one line per wrong verdict."""
    rows: dict[str, Row] = {name: Row() for name in ("spelling", *OPERATORS)}
    wrong: list[str] = []
    for case in cases:
        row = rows[case.operator]
        c = row.counts
        c["mutants"] += 1
        if case.kind in ("discarded", "generator-error"):
            c["discarded"] += 1
            continue
        outcome = judge(case)
        row.seconds += outcome.seconds
        verdicts = [outcome]
        if case.kind == "nonfinite":
            waived = judge(case, assume_finite=True)
            verdicts.append(waived)
        if case.kind in ("differs", "nonfinite"):
            c["differing"] += 1
            c["refused"] += not outcome.fused
        else:
            c["equal"] += 1
            c["accepted"] += outcome.fused or outcome.partial
        for v in verdicts:
            if v.wrong:
                c[v.wrong] += 1
                wrong.append(_line(case, v))
    return rows, wrong


def _line(case: Case, outcome: Outcome) -> str:
    reason = f": {outcome.reasons[0][:200]}" if outcome.reasons and outcome.wrong == "wrongly refused" else ""
    waived = " (assume_finite)" if outcome.wrong == "wrongly refused" and case.kind == "nonfinite" else ""
    return f"{outcome.wrong}{waived}: {case.describe()}{reason}"


def render(rows: dict[str, Row]) -> str:
    head = f"{'operator':22}" + "".join(f"{c:>16}" for c in COLUMNS) + f"{'ms/mutant':>12}"
    lines = [head]
    total = Row()
    for name, row in rows.items():
        if not row.counts["mutants"]:
            continue
        judged = row.counts["mutants"] - row.counts["discarded"]
        ms = 1000 * row.seconds / judged if judged else 0.0
        lines.append(f"{name:22}" + "".join(f"{row.counts[c]:>16}" for c in COLUMNS) + f"{ms:>12.1f}")
        for c in COLUMNS:
            total.counts[c] += row.counts[c]
        total.seconds += row.seconds
    judged = total.counts["mutants"] - total.counts["discarded"]
    lines.append(f"{'total':22}" + "".join(f"{total.counts[c]:>16}" for c in COLUMNS) +
                 f"{(1000 * total.seconds / judged if judged else 0.0):>12.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=300, help="mutants to generate (default 300)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--spellings", type=int, default=40, help="random spellings to mutate (default 40)")
    args = parser.parse_args(argv)
    if args.budget < 1 or args.spellings < 2:
        parser.error("--budget must be >= 1 and --spellings >= 2")
    warnings.simplefilter("ignore", RuntimeWarning)  # onnxruntime-free numpy evaluation of inf/NaN probes
    cases = generate(args.seed, args.budget, args.spellings)
    rows, wrong = tally(cases)
    print(f"proof fuzz: seed {args.seed}, {args.budget} mutants of {args.spellings} spellings")
    print(render(rows))
    for line in wrong:
        print(line)
    return 1 if any(r.counts["wrongly fused"] for r in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
