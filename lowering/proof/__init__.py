"""Proofs that a match computes its fused op's contract (lowering.proof.prove)."""
