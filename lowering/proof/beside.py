"""Proofs beside the pass: children (lowering.beside) whose proofs come back into this process.

Proving a match costs a walk over its nodes and, for a family of forms no proof covers yet, solver
calls; on a graph with thousands of matches that is a large share of the pass. None of it changes
what the pass does next unless a proof fails, which for a form's match is rare. So on a large
graph the `lower` command hands each form match to a child as the pass finds it and goes on as if
the match were proved; before anything is rewritten it takes the child's verdicts (lowering.rewrite).
The recogniser's children prove the matches they find too. What a child proved joins this
process's cache, and the proof store with it, as if proved here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..beside import Beside
from . import prove

In = TypeVar("In")
Out = TypeVar("Out")


def proving_child(work: Callable[[In], Out]) -> Beside[In, Out] | None:
    """A child applying `work` (lowering.beside.Beside.start), whose new proofs come back with its
    results; None where no child can run."""
    prove.load_stored()  # the stores are read here, once: the child sends back only what it proved
    before = set(prove.cached_verdicts())

    def made() -> dict[tuple, prove.Verdict]:
        return {k: v for k, v in prove.cached_verdicts().items() if k not in before}

    return Beside.start(work, made, prove.absorb)
