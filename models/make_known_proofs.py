"""Proves the families of every exporter spelling this repository holds and ships the proofs
(lowering/proof/known_proofs.pickle), so a fresh install fuses those spellings without a solver.

Every fixture under tests/fixtures and every sample model here is fused with no store read
(ASCEND_LOWERING_PROOF_CACHE=off), so each proof is made by this checkout's code; the family
proofs made on the way (a structure's, with its constants open under their relations) are
written under this code's digest. Rerun after changing lowering/proof or the contracts: the
shipped proofs are then stale, which lowering reads as none and tests/lowering/test_known_proofs.py
reports.
Usage (from the project's own environment): python models/make_known_proofs.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["ASCEND_LOWERING_PROOF_CACHE"] = "off"

import onnx  # noqa: E402

import lowering  # noqa: E402
from lowering.proof import prove, store  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def sources() -> list[Path]:
    return sorted([*(REPO / "tests" / "fixtures").rglob("*.onnx"), *(REPO / "models").glob("*.onnx")])


def family_proofs() -> dict[tuple, prove.Verdict]:
    """The family verdicts fusing every source makes (a family key has four parts: the structure,
    the parameters' expressions, fine or coarse relations, the relations)."""
    for path in sources():
        try:
            lowering.fuse(onnx.load(str(path)))
        except lowering.LoweringError:
            continue  # a fixture of bad input: nothing to prove
    return {key: verdict for key, verdict in prove.cached_verdicts().items() if len(key) == 4}


def main() -> int:
    verdicts = family_proofs()
    store.write_shipped(verdicts)
    held = sum(v.holds for v in verdicts.values())
    print(f"{len(verdicts)} family proofs ({held} hold) from {len(sources())} models -> "
          f"{store.SHIPPED.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
