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
    assert len(rows) == 3 * 3 * (5 + len(bench.BROADCAST_ROWS))  # targets x dtypes x variants
    for row in rows:
        assert row[-1] in ("meets", "no CANN kernel to compare"), row
    apgd_f32 = [r for r in rows if r[1] == "ApplyProximalGradientDescent" and r[3] == "float32"
                and r[2] != bench.CLIP_VARIANT]
    on_950 = [r for r in apgd_f32 if r[0] == "ascend950"]
    assert {r[4] for r in on_950} == {"8"}  # constant or runtime alpha/l1/l2: one kernel
    assert {r[5] for r in on_950} == {"8 (ops-nn tiling)"}
    # 910B-class: Sign as Compare/Select/Add over the whole tile (6 more than Sign's one call)
    assert {r[4] for r in apgd_f32 if r[0] != "ascend950"} == {"14"}
    clip_f32 = {r[4] for r in rows if r[2] == bench.CLIP_VARIANT and r[3] == "float32" and r[0] == "ascend950"}
    assert clip_f32 == {"12"}  # the 8 of the general form + the NaN-safe clamp at shrink_max
    # a broadcast label costs its two Gathers over the same kernel with a streamed label
    sl1 = {(r[0], r[2], r[3]): int(r[4]) for r in rows if r[1] == "SmoothL1LossGradV2"}
    for target in bench.TARGETS:
        for dtype in bench.DTYPES:
            row = sl1[(target, bench.BROADCAST_ROWS[0][0], dtype)]
            assert row == sl1[(target, "dout 1 element", dtype)] + 2


def test_no_chunked_sign_on_targets_without_a_native_one() -> None:
    bench = _load()
    for target in bench.TARGETS:
        t = bench.get_target(target)
        for dtype in bench.DTYPES:
            for v in bench._variants(dtype):
                plain = bench.kernel_for_spec(v.spec)
                art = bench.artifact_for_target(plain, t)
                if t.native_sign:
                    assert art.kernel == plain, (target, v.label)  # Sign is one instruction there
                else:
                    assert not any(ins.op.value == "Sign" for ins in art.kernel.instrs), (target, v.label)


def test_cann_smooth_l1_dag_figures() -> None:
    bench = _load()
    dag = bench.cann_smooth_l1_dag("float32", scalar_dout=False)
    assert dag.vector_instruction_count() == 15
    assert bench.cann_smooth_l1_dag("float16", scalar_dout=True).vector_instruction_count() == 19
