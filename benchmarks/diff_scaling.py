"""How `lower diff` time grows with the number of fused nodes (issue 17: it was quadratic).

Builds float32[64] models with 100, 250, 500 and 1000 fused nodes: planted SmoothL1-backward and
proximal-update instances (the builders of benchmarks/pass_speed.py, each instance with its own
constants, so each fused node gets its own model-local function), one standard node after each
instance (so the fused model alternates fused nodes and onnxruntime segments), leftovers summed
into graph outputs. Each model is fused with the pass, both are saved, and `lower diff` runs in a
fresh Python process per size (no kernel cache carried over), timed in-process around run_diff
(imports and process start left out), --repeat times, best kept.

Prints per size: fused nodes, graph nodes, onnxruntime sessions, total seconds, milliseconds per
fused node, and that per-node time against the smallest size's. Goal: per-node time flat within
1.5x from 100 to 1000 fused nodes, i.e. no size's per-node time over 1.5x the smallest size's
(the per-node time may fall with size: the fixed costs, reading the models and the unfused
model's session, are spread over more nodes). Exits 1 if any diff does not PASS (the models are built so
that they do), never on timing.

Usage: python benchmarks/diff_scaling.py [--sizes 100,250,500,1000] [--repeat 3] [--seed 0]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))
sys.path.insert(0, str(BENCH_DIR))

from pass_speed import _Builder  # noqa: E402

from lowering.api import fuse  # noqa: E402

SIZES = (100, 250, 500, 1000)
GOAL_RATIO = 1.5
WARM_UP_SIZE = 2
BETWEEN = ("Neg", "Relu", "Abs")  # standard nodes between instances: bounded, never overflow


def build_model(fused_nodes: int, seed: int = 0) -> onnx.ModelProto:
    """An unfused model in which the pass fuses exactly `fused_nodes` nodes."""
    b = _Builder(seed)
    for i in range(16):
        b.publish(b.graph_input(f"in{i}"))
    go = b.graph_input("go", scalar=True)
    for serial in range(fused_nodes):
        if serial % 2 == 0:
            b.smooth_l1(serial, go)
        else:
            b.proximal(serial)
        b.publish(b.node(BETWEEN[serial % len(BETWEEN)], [b.pick()]))
    b.finish()
    return b.model


def _run_diff(unfused: Path, fused: Path) -> int:
    from app.cli import build_diff_parser
    from app.diff_cli import run_diff

    with contextlib.redirect_stdout(io.StringIO()):
        return run_diff(unfused, fused, build_diff_parser().parse_args([str(unfused), str(fused)]))


def time_diff(unfused: Path, fused: Path, warm_up: tuple[Path, Path]) -> dict[str, float | int]:
    """In this process: wall time of one run_diff after a warm-up one, its exit code and the
    onnxruntime sessions it made."""
    import runtime.ort_exec as ort_exec

    _run_diff(*warm_up)
    made = [0]
    real = ort_exec._session

    def counting(model: onnx.ModelProto):
        made[0] += 1
        return real(model)

    ort_exec._session = counting
    start = time.perf_counter()
    rc = _run_diff(unfused, fused)
    return {"seconds": time.perf_counter() - start, "rc": rc, "sessions": made[0]}


def _save_pair(size: int, seed: int, tmp: Path) -> tuple[Path, Path, int]:
    model = build_model(size, seed)
    fused, report = fuse(model)
    if len(report.fusions) != size:
        raise SystemExit(f"diff_scaling: the model for {size} fused nodes fused {len(report.fusions)}")
    unfused_path, fused_path = tmp / f"u{size}.onnx", tmp / f"f{size}.onnx"
    onnx.save(model, str(unfused_path))
    onnx.save(fused, str(fused_path))
    return unfused_path, fused_path, len(model.graph.node)


def measure(size: int, seed: int, repeat: int, tmp: Path) -> dict[str, float | int]:
    """Best of `repeat` fresh processes, each timing one diff of the `size` model."""
    warm_up = _save_pair(WARM_UP_SIZE, seed, tmp)[:2]
    unfused_path, fused_path, graph_nodes = _save_pair(size, seed, tmp)
    best: dict[str, float | int] = {}
    for _ in range(repeat):
        child = subprocess.run([sys.executable, __file__, "--child", str(unfused_path), str(fused_path),
                                "--warm-up", *map(str, warm_up)], capture_output=True, text=True, check=False)
        if child.returncode != 0:
            raise SystemExit(f"diff_scaling: the child for {size} fused nodes failed: {child.stderr.strip()}")
        result = json.loads(child.stdout)
        if not best or result["seconds"] < best["seconds"]:
            best = result
    best.update(fused_nodes=size, graph_nodes=graph_nodes)
    return best


def format_rows(rows: list[dict[str, float | int]]) -> str:
    base = rows[0]["seconds"] / rows[0]["fused_nodes"]
    lines = [f"{'fused nodes':>11}  {'graph nodes':>11}  {'sessions':>8}  {'total s':>8}  {'ms/fused node':>13}  "
             f"{'vs first':>8}  diff",
             "-" * 76]
    for r in rows:
        per = r["seconds"] / r["fused_nodes"]
        lines.append(f"{r['fused_nodes']:>11}  {r['graph_nodes']:>11}  {r['sessions']:>8}  {r['seconds']:>8.2f}  "
                     f"{per * 1e3:>13.2f}  {per / base:>7.2f}x  {'PASS' if r['rc'] == 0 else 'FAIL'}")
    pers = [r["seconds"] / r["fused_nodes"] for r in rows]
    growth = max(pers) / pers[0]
    verdict = "met" if growth <= GOAL_RATIO else "missed"
    lines.append(f"per-node time: at most {growth:.2f}x the smallest size's (goal <= {GOAL_RATIO}x: {verdict}); "
                 f"spread max/min {max(pers) / min(pers):.2f}x (fixed costs weigh most at the smallest size)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)),
                        help="fused-node counts, comma-separated (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size, each in a fresh process; best kept")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model builder")
    parser.add_argument("--child", nargs=2, metavar=("UNFUSED", "FUSED"), help=argparse.SUPPRESS)
    parser.add_argument("--warm-up", nargs=2, metavar=("UNFUSED", "FUSED"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(time_diff(Path(args.child[0]), Path(args.child[1]),
                                   (Path(args.warm_up[0]), Path(args.warm_up[1])))))
        return 0
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="diff_scaling_") as tmp:
        for size in sizes:
            rows.append(measure(size, args.seed, args.repeat, Path(tmp)))
            print(f"  {size} fused nodes: {rows[-1]['seconds']:.2f} s", file=sys.stderr, flush=True)
    print(format_rows(rows))
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
