"""What `--verify` costs on big tensors: the CPU backend against onnxruntime, same run, same data.

For each fused op, dtype and size (1M and 16M elements) this times
  * onnxruntime (CPU provider, graph optimizations off, session made beforehand) on the unfused
    subgraph: PyTorch's SmoothL1 backward decomposition, TensorFlow's proximal update;
  * the CPU backend on the fused node: codegen's kernel IR interpreted per core and tile with
    AscendC numerics (kernel lowering is cached after the first call, as in a diff);
and prints the best of --repeat runs of each and their ratio. Goal: ratio <= 2.

Usage: python benchmarks/cpu_backend.py [--sizes 1M,16M] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codegen.nodes import InputSpec, NodeSpec
from contracts.fused_ops import PROXIMAL_GD, SMOOTH_L1_GRAD
from runtime.backend import KernelCall
from runtime.backends.cpu import CpuBackend

ONNX_TYPES = {"float32": T.FLOAT, "float16": T.FLOAT16}
TARGET = "ascend950"


def _wrap(dtype: str, names: list[str], nodes: list[onnx.NodeProto]) -> list[str]:
    if dtype == "float32":
        return names
    nodes += [h.make_node("Cast", [n], [n + "_f"], to=T.FLOAT) for n in names]
    return [n + "_f" for n in names]


def smooth_l1_unfused(n: int, dtype: str) -> onnx.ModelProto:
    nodes: list[onnx.NodeProto] = []
    p, lab, d = _wrap(dtype, ["predict", "label", "dout"], nodes)
    res = "out" if dtype == "float32" else "out_f"
    nodes += [h.make_node("Mul", [d, "norm"], ["g"]), h.make_node("Sub", [p, lab], ["x"]),
              h.make_node("Abs", ["x"], ["ax"]), h.make_node("Less", ["ax", "beta"], ["c"]),
              h.make_node("Mul", ["g", "x"], ["gx"]), h.make_node("Div", ["gx", "beta"], ["a"]),
              h.make_node("Sign", ["x"], ["sx"]), h.make_node("Mul", ["g", "sx"], ["b"]),
              h.make_node("Where", ["c", "a", "b"], [res])]
    if dtype != "float32":
        nodes.append(h.make_node("Cast", [res], ["out"], to=ONNX_TYPES[dtype]))
    ty = ONNX_TYPES[dtype]
    graph = h.make_graph(nodes, "sl1", [h.make_tensor_value_info(x, ty, [n]) for x in ("predict", "label", "dout")],
                         [h.make_tensor_value_info("out", ty, [n])],
                         initializer=[h.make_tensor("beta", T.FLOAT, [], [1.0]),
                                      h.make_tensor("norm", T.FLOAT, [], [1.0 / n])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def proximal_unfused(n: int, dtype: str) -> onnx.ModelProto:
    nodes: list[onnx.NodeProto] = []
    var, delta = _wrap(dtype, ["var", "delta"], nodes)
    res = "out" if dtype == "float32" else "out_f"
    nodes += [h.make_node("Mul", [delta, "alpha"], ["ad"]), h.make_node("Sub", [var, "ad"], ["prox"]),
              h.make_node("Abs", ["prox"], ["ap"]), h.make_node("Mul", ["alpha", "l1"], ["t"]),
              h.make_node("Sub", ["ap", "t"], ["apt"]), h.make_node("Relu", ["apt"], ["m"]),
              h.make_node("Sign", ["prox"], ["sp"]), h.make_node("Mul", ["sp", "m"], ["num"]),
              h.make_node("Mul", ["alpha", "l2"], ["al2"]), h.make_node("Add", ["one", "al2"], ["den"]),
              h.make_node("Div", ["num", "den"], [res])]
    if dtype != "float32":
        nodes.append(h.make_node("Cast", [res], ["out"], to=ONNX_TYPES[dtype]))
    ty = ONNX_TYPES[dtype]
    ins = [h.make_tensor_value_info(x, ty, [n]) for x in ("var", "delta")]
    ins += [h.make_tensor_value_info(x, T.FLOAT, []) for x in ("alpha", "l1", "l2")]
    graph = h.make_graph(nodes, "prox", ins, [h.make_tensor_value_info("out", ty, [n])],
                         initializer=[h.make_tensor("one", T.FLOAT, [], [1.0])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _time_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray], repeat: int) -> float:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return _best(lambda: sess.run(None, feeds), repeat)


def bench(op: str, dtype: str, n: int, repeat: int) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    np_dt = np.dtype(dtype)
    if op == SMOOTH_L1_GRAD:
        data = {k: rng.normal(0, 2, n).astype(np_dt) for k in ("predict", "label", "dout")}
        model = smooth_l1_unfused(n, dtype)
        spec = NodeSpec("bench", op, {k: InputSpec(dtype, (n,)) for k in data},
                        {"sigma": 1.0, "reduction": "mean", "scale": 1.0})
        feeds = data
    else:
        data = {"var": rng.normal(0, 2, n).astype(np_dt), "delta": rng.normal(0, 2, n).astype(np_dt),
                "alpha": np.array(0.1, np.float32), "l1": np.array(0.05, np.float32),
                "l2": np.array(0.2, np.float32)}
        model = proximal_unfused(n, dtype)
        spec = NodeSpec("bench", op, {k: InputSpec("float32" if v.ndim == 0 else dtype, v.shape)
                                      for k, v in data.items()}, {"scalar_form": "raw"})
        feeds = data
    t_ort = _time_onnxruntime(model, feeds, repeat)
    # onnxruntime's idle worker threads spin for a while after a run; let them stop first so
    # they do not take the cores the CPU backend's threads need.
    time.sleep(0.5)
    cpu = CpuBackend()
    call = KernelCall(spec, data, TARGET)
    cpu.run(call)  # lower and plan once, as a diff does before timing matters
    t_cpu = _best(lambda: cpu.run(call), repeat)
    return t_ort, t_cpu


def _size(text: str) -> int:
    text = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
    return int(text.rstrip("KM")) * mult


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1M,16M", help="element counts, e.g. 1M,16M")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best counts")
    ap.add_argument("--dtypes", default="float32,float16")
    args = ap.parse_args(argv)
    rows = []
    print(f"{'op':<30} {'dtype':<8} {'elements':>10} {'onnxruntime s':>14} {'cpu backend s':>14} {'ratio':>6}")
    for op in (SMOOTH_L1_GRAD, PROXIMAL_GD):
        for dtype in args.dtypes.split(","):
            for n in (_size(s) for s in args.sizes.split(",")):
                t_ort, t_cpu = bench(op, dtype, n, args.repeat)
                rows.append(t_cpu / t_ort)
                print(f"{op:<30} {dtype:<8} {n:>10} {t_ort:>14.3f} {t_cpu:>14.3f} {t_cpu / t_ort:>6.2f}",
                      flush=True)
    print(f"worst ratio {max(rows):.2f} (goal <= 2)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
