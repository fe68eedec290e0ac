"""The pass's result does not depend on Python's string hashing: two runs under different hash
seeds give the same fused model and the same report on a dense random graph (the benchmark's,
where many kinks over differences make the recogniser's walks meet their budgets)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx

REPO = Path(__file__).resolve().parents[2]
_RUN = """
import hashlib, sys
import onnx
from lowering.rewrite import fuse_proto
fused, report = fuse_proto(onnx.load(sys.argv[1]))
print(hashlib.sha256(fused.SerializeToString(deterministic=True)).hexdigest())
print(report.to_json())
"""


def test_two_hash_seeds_give_the_same_fusions_and_report(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import pass_speed
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    model, _ = pass_speed.build_graph(3000, seed=0)
    path = tmp_path / "g.onnx"
    onnx.save(model, str(path))
    outputs = [subprocess.run([sys.executable, "-c", _RUN, str(path)], capture_output=True, text=True, check=True,
                              env={"PYTHONHASHSEED": seed, "PATH": ""}, cwd=REPO).stdout
               for seed in ("0", "1", "2", "3")]
    assert len(set(outputs)) == 1



HALF_PRECISION = sorted(p for p in [*REPO.glob("tests/fixtures/*/*.onnx"), *REPO.glob("models/*.onnx")]
                        if any(tag in p.name for tag in ("f16", "bf16", "fp16", "half")))
_FUSIONS = """
import json, sys
import onnx
import lowering
out = {}
for path in sys.argv[1:]:
    _, report = lowering.fuse(onnx.load(path))
    out[path] = [[f.op_type, f.output, sorted(f.attributes.items())] for f in report.fusions]
print(json.dumps(out))
"""


def test_a_verdict_does_not_hang_on_what_an_earlier_run_proved(tmp_path: Path) -> None:
    """The fusions of each model are the same in a first run, which proves everything afresh, in a
    second that reads the shipped proofs and stores its own, and in a third that finds those on
    disk and takes the models in reverse order. Half-precision graphs hold a constant beside its
    rounding, two candidates for one parameter, so they are where a proof made for one instance
    could be taken for another whose node states the other candidate."""
    assert HALF_PRECISION
    store = str(tmp_path / "proofs")

    def run(paths: list[Path], proofs: str) -> dict:
        env = {"ASCEND_LOWERING_PROOF_CACHE": proofs, "PATH": "", "HOME": str(tmp_path)}
        done = subprocess.run([sys.executable, "-c", _FUSIONS, *map(str, paths)], capture_output=True, text=True,
                              check=True, env=env, cwd=REPO)
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = run(HALF_PRECISION, "off")  # nothing stored or shipped is read
    assert run(HALF_PRECISION, store) == first  # the shipped proofs read, this run's stored
    assert list((tmp_path / "proofs").glob("proofs-*")), "the run stored no proofs"
    assert run(HALF_PRECISION[::-1], store) == first


def _side_by_side(paths: list[Path]) -> onnx.ModelProto:
    """The graphs of several models in one (names prefixed apart)."""
    out = onnx.load(str(paths[0]))
    for k, p in enumerate(paths[1:]):
        g = onnx.compose.add_prefix(onnx.load(str(p)), f"m{k}_").graph
        for name in ("node", "input", "output", "initializer", "value_info"):
            getattr(out.graph, name).extend(getattr(g, name))
    return out


def test_a_refusal_reads_the_same_whatever_the_solver_was_asked_before(monkeypatch) -> None:
    """A refusal's counterexample comes from a solver context of its own: the report of a model
    proved afresh three times in one process (each time after the solver answered the earlier
    runs' queries) is the same each time."""
    from lowering.proof import prove
    from lowering.rewrite import fuse_proto

    jax = REPO / "tests/fixtures/jax"
    paths = [jax / "sl1_optax_huber_none_d05_vjp_f16.onnx",
             *(sorted(jax.glob("sl1_*f32*.onnx")) + sorted(jax.glob("prox*.onnx")))[:12]]
    model = _side_by_side(paths)
    monkeypatch.setenv("ASCEND_LOWERING_PROOF_CACHE", "off")
    reports = []
    try:
        for _ in range(3):
            prove.clear_cache()
            reports.append(fuse_proto(model)[1].to_json())
    finally:
        prove.clear_cache()
        prove._stored["loaded"] = False
    assert any("differs from" in r for r in reports)
    assert reports[0] == reports[1] == reports[2]
