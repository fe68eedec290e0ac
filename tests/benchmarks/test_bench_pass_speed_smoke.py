"""Smoke test of benchmarks/pass_speed.py at a tiny size: the generator, and what each tool fuses.

No timing is asserted; this guards the benchmark's meaning (the graphs are valid, deterministic,
and the planted positives / near misses are what the fusion counts are compared against).
"""

from __future__ import annotations

import onnx
import pytest
from bench_scripts import load

SEEDS = (0, 1, 2, 3)
SIZE = 500


bench = load("pass_speed")


@pytest.fixture(scope="module", params=SEEDS)
def graph(request):
    return bench.build_graph(SIZE, seed=request.param)


@pytest.fixture(scope="module")
def ours(graph):
    from lowering.rewrite import fuse_proto

    model, _ = graph
    return bench.fusions_of_ours(*fuse_proto(model, recompute_shared=False))  # as run_ours and onnxscript


def test_generator_makes_a_valid_graph_of_about_the_asked_size(graph):
    model, planted = graph
    onnx.checker.check_model(model)
    assert 0.8 * SIZE <= len(model.graph.node) <= 1.2 * SIZE
    assert planted.count(bench.SMOOTH_L1_GRAD) >= 10 and planted.count(bench.PROXIMAL_GD) >= 10
    kinds = {i.kind for i in planted.near_misses}
    assert kinds == set(bench.NEAR_MISS_SL1) | set(bench.NEAR_MISS_PROX)


def test_generator_is_deterministic():
    a, _ = bench.build_graph(SIZE, seed=7)
    b, _ = bench.build_graph(SIZE, seed=7)
    c, _ = bench.build_graph(SIZE, seed=8)
    assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)
    assert a.SerializeToString(deterministic=True) != c.SerializeToString(deterministic=True)


def test_our_pass_fuses_exactly_the_planted_positives(graph, ours):
    _, planted = graph
    assert bench.check_fusions("ours", ours, planted) == []
    assert len(ours) == len(planted.positives)


def test_our_pass_fuses_every_planted_positive_at_2k():
    from lowering.rewrite import fuse_proto

    model, planted = bench.build_graph(2000, seed=0)
    assert bench.check_fusions("ours", bench.fusions_of_ours(*fuse_proto(model, recompute_shared=False)), planted) == []


def test_onnxscript_rules_fuse_exactly_the_planted_positives(graph, tmp_path):
    model, planted = graph
    src = tmp_path / "g.onnx"
    onnx.save(model, str(src))
    rewritten = bench.run_onnxscript(src, tmp_path / "out.onnx", bench.onnxscript_rules(as_function=False))
    fusions = bench.fusions_of_ir(rewritten)
    assert bench.check_fusions("onnxscript", fusions, planted) == []
    assert len(fusions) == len(planted.positives)


def test_checker_reports_a_missed_instance_and_a_fused_near_miss(graph):
    _, planted = graph
    hit = [bench.Fused(i.op_type, i.output, None) for i in planted.positives[1:]]
    near = planted.near_misses[0]
    problems = bench.check_fusions("t", hit + [bench.Fused(near.op_type, near.output, None)], planted)
    assert any("1 planted instances not fused" in p for p in problems)
    assert any("1 near misses fused" in p for p in problems)


def test_each_tool_is_timed_in_a_child_process_that_reports_its_fusions(graph, tmp_path):
    model, planted = graph
    src = tmp_path / "g.onnx"
    onnx.save(model, str(src))
    run = bench.time_in_child("ours", src, tmp_path / "out.onnx", onnxscript_functions=False)
    assert run.seconds > 0 and run.peak_mb > 0
    assert bench.check_fusions("ours", run.fusions, planted) == []


def test_both_tools_fuse_the_planted_positives_without_value_info(graph, tmp_path):
    # the benchmark's third row: ours works out the types itself, onnxscript after onnx_ir's inference
    model, planted = graph
    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    del bare.graph.value_info[:]
    src = tmp_path / "bare.onnx"
    onnx.save(bare, str(src))
    for tool in ("ours", "onnxscript"):
        run = bench.time_in_child(tool, src, tmp_path / f"{tool}.onnx", onnxscript_functions=False, infer_shapes=True)
        assert bench.check_fusions(tool, run.fusions, planted) == []
        assert len(run.fusions) == len(planted.positives)
