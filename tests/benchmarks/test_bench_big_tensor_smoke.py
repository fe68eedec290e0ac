"""Smoke test of benchmarks/big_tensor_types.py at a tiny size: the model is valid and both runs
report a result (no timing is asserted)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import onnx

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "big_tensor_types.py"


def _load():
    spec = importlib.util.spec_from_file_location("big_tensor_types_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_small_run_fuses_and_infers(capsys) -> None:
    bench = _load()
    onnx.checker.check_model(bench.build(64), full_check=True)
    assert bench.main(["--elements", "64"]) == 0
    out = capsys.readouterr().out
    assert "lower" in out and "inference" in out
