"""Smoke test of benchmarks/big_tensor_types.py at a tiny size: the model is valid and both runs
report a result (no timing is asserted)."""

from __future__ import annotations

import onnx
from bench_scripts import load


def test_small_run_fuses_and_infers(capsys) -> None:
    bench = load("big_tensor_types")
    onnx.checker.check_model(bench.build(64), full_check=True)
    assert bench.main(["--elements", "64"]) == 0
    out = capsys.readouterr().out
    assert "lower" in out and "inference" in out
