"""The kernel-quality table: no generated kernel uses more vector instructions or more UB per
element than the hand-written CANN kernel it is compared with."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "kernel_quality.py"


def _load():
    spec = importlib.util.spec_from_file_location("kernel_quality_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_every_row_meets_the_cann_bar() -> None:
    bench = _load()
    rows = bench.rows()
    assert len(rows) == 3 * 3 * 5  # targets x dtypes x variants
    for row in rows:
        assert row[-1] in ("meets", "no CANN kernel to compare"), row
    apgd_f32 = [r for r in rows if r[1] == "ApplyProximalGradientDescent" and r[3] == "float32"
                and r[2] != bench.CLIP_VARIANT]
    assert {r[4] for r in apgd_f32} == {"8"}  # constant or runtime alpha/l1/l2: one kernel
    assert {r[5] for r in apgd_f32} == {"8 (ops-nn tiling)"}
    clip_f32 = {r[4] for r in rows if r[2] == bench.CLIP_VARIANT and r[3] == "float32"}
    assert clip_f32 == {"12"}  # the 8 of the general form + the NaN-safe clamp at shrink_max


def test_cann_smooth_l1_dag_figures() -> None:
    bench = _load()
    dag = bench.cann_smooth_l1_dag("float32", scalar_dout=False)
    assert dag.vector_instruction_count() == 15
    assert bench.cann_smooth_l1_dag("float16", scalar_dout=True).vector_instruction_count() == 19
