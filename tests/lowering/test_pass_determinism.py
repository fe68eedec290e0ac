"""The pass's result does not depend on Python's string hashing: two runs under different hash
seeds give the same fused model and the same report on a dense random graph (the benchmark's,
where many kinks over differences make the recogniser's walks meet their budgets)."""

from __future__ import annotations

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
