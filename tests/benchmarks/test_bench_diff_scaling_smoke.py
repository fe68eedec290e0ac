"""Smoke test of benchmarks/diff_scaling.py at its smallest size: the model builder fuses exactly
the asked number of nodes, the diff PASSes, and the table is printed. No timing is asserted."""

from __future__ import annotations

from bench_scripts import load

bench = load("diff_scaling")


def test_builder_fuses_exactly_the_asked_number_of_nodes():
    from lowering.api import fuse

    for count in (2, 7):
        _, report = fuse(bench.build_model(count))
        assert len(report.fusions) == count
        assert {f.op_type for f in report.fusions} == {"SmoothL1LossGradV2", "ApplyProximalGradientDescent"}


def test_smallest_size_runs_and_passes(capsys):
    smallest = str(min(bench.SIZES))
    assert bench.main(["--sizes", smallest, "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.split()[:1] == [smallest])
    assert row.endswith("PASS") and "per-node time: at most" in out
