"""What typing a model without value_info costs when it computes one big tensor.

Builds a 1-D SmoothL1 backward over 16M elements whose predict comes from Range and whose label
from ConstantOfShape, with no value_info: every type a match needs must be worked out. Then runs,
each in a fresh process, with its peak resident memory:
  lower      the `lower` command (--emit onnx), which infers the types it asks for from their
             producers (lowering.local_types)
  inference  onnx.shape_inference.infer_shapes(data_prop=True) alone: whole-model inference with
             data propagation, which evaluates the 16M-element values to propagate them
and prints a table: lower must fuse the one instance, inference must give x = predict - label its
shape; exit 1 otherwise.

Usage: python benchmarks/big_tensor_types.py [--elements 16777216]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

_CHILD = """
import json, resource, sys, time
start = time.perf_counter()
if sys.argv[1] == "lower":
    from pathlib import Path
    from app.cli import main
    code = main([sys.argv[2], "--target", "ascend950", "--emit", "onnx", "-o", sys.argv[3], "-q"])
    report = json.loads((Path(sys.argv[3]) / "report.json").read_text()) if code == 0 else {}
    result = {"ok": code == 0 and len(report.get("fusions", [])) == 1}
else:
    import onnx
    inferred = onnx.shape_inference.infer_shapes(onnx.load(sys.argv[2]), data_prop=True)
    dims = [[d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in inferred.graph.value_info if vi.name == "x"]
    result = {"ok": dims == [[int(sys.argv[4])]]}
result["seconds"] = time.perf_counter() - start
result["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(result))
"""


def build(elements: int) -> onnx.ModelProto:
    scalar = {"beta": 0.5, "start": 0.0, "limit": float(elements), "delta": 1.0}
    inits = [nh.from_array(np.array(v, np.float32), k) for k, v in scalar.items()]
    inits.append(nh.from_array(np.array([elements], np.int64), "shape"))
    nodes = [h.make_node("ConstantOfShape", ["shape"], ["label"], value=nh.from_array(np.array([0.25], np.float32))),
             h.make_node("Range", ["start", "limit", "delta"], ["p"]),
             h.make_node("Sub", ["p", "label"], ["x"]), h.make_node("Abs", ["x"], ["ax"]),
             h.make_node("Less", ["ax", "beta"], ["lt"]), h.make_node("Div", ["x", "beta"], ["lin"]),
             h.make_node("Sign", ["x"], ["sg"]), h.make_node("Where", ["lt", "lin", "sg"], ["w"]),
             h.make_node("Mul", ["w", "g"], ["grad"])]
    graph = h.make_graph(nodes, "big_tensor", [h.make_tensor_value_info("g", TensorProto.FLOAT, [])],
                         [h.make_tensor_value_info("grad", TensorProto.FLOAT, [elements])], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def run(tool: str, model: Path, out: Path, elements: int) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, tool, str(model), str(out), str(elements)],
                          capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])
    if done.returncode != 0:
        return {"ok": False, "seconds": float("nan"), "peak_mb": float("nan")}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", type=int, default=16 * 1024 * 1024)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="big_tensor_") as tmp:
        path = Path(tmp) / "big_tensor.onnx"
        onnx.save(build(args.elements), str(path))
        rows = {tool: run(tool, path, Path(tmp) / "out", args.elements) for tool in ("lower", "inference")}
    print(f"1-D SmoothL1 backward over {args.elements} elements, no value_info")
    print(f"{'run':<10} {'ok':>4} {'seconds':>8} {'peak MB':>8}")
    for tool, r in rows.items():
        print(f"{tool:<10} {'yes' if r['ok'] else 'no':>4} {r['seconds']:>8.2f} {r['peak_mb']:>8.0f}")
    return 0 if all(r["ok"] for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
