"""Smoke test of benchmarks/proof_fuzz.py at a tiny budget: the table's rows add up, every wrong
verdict gets its line, and the exit code says whether any mutant was wrongly fused."""

from __future__ import annotations

from bench_scripts import load

bench = load("proof_fuzz")


def test_a_tiny_budget_prints_a_consistent_table(capsys):
    code = bench.main(["--budget", "6", "--seed", "3", "--spellings", "4"])
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("operator"))
    total = next(line for line in lines if line.startswith("total")).split()[1:]
    counts = dict(zip(bench.COLUMNS, (int(v) for v in total[:len(bench.COLUMNS)])))
    assert counts["mutants"] == 6 + 4  # the mutants and the unmutated spellings
    assert counts["differing"] + counts["equal"] + counts["discarded"] == counts["mutants"]
    assert counts["refused"] <= counts["differing"] and counts["accepted"] <= counts["equal"]
    wrong = [line for line in lines[header:] if line.startswith("wrongly")]
    assert len(wrong) == counts["wrongly fused"] + counts["wrongly refused"]
    assert code == (1 if counts["wrongly fused"] else 0)


def test_bad_budget_is_one_line_and_exit_2(capsys):
    import pytest

    with pytest.raises(SystemExit) as exc:
        bench.main(["--budget", "0"])
    assert exc.value.code == 2
