"""The twin-compiled fused kernels against onnxruntime on the unfused subgraphs, 16M float32 elements.

    python benchmarks/twin.py [--elements N] [--target T] [--rounds R]

For each kernel, in one run and interleaved round by round (best of R): onnxruntime on the
unfused subgraph (all graph optimizations, default threads; its threads do not spin after a run,
so they leave the CPUs to whatever runs next), the twin on the fused node (the emitted host tiling
checked against codegen's plan, then every block of the emitted kernel on the twin backend's
worker threads: TwinBackend.launch), and this machine's memory-bandwidth floor: a large float32 array copy (numpy),
whose bytes per second turn the minimum traffic of the kernel (each input read once, the output
written once) into the fastest time any implementation could reach. All three write into output
buffers allocated once (onnxruntime through IOBinding), so first-touch page faults of fresh
64 MiB outputs, which depend on the allocator's history, are in none of the timings.

Bytes per element: the twin's measured GM traffic (the header set counts every DataCopy,
DataCopyPad and GetValue) against that minimum, and onnxruntime's as the sum of every unfused
node's input and output tensors.

Goals: twin >= 4x faster than onnxruntime; twin within 2.5x of the bandwidth floor.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import shape_inference

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codegen.nodes import fused_nodes
from contracts.fused_ops import OP_SPECS
from lowering import fuse
from runtime.backend import KernelCall
from runtime.backends.twin import TwinBackend
from runtime.graph_exec import model_constants, node_spec_at_runtime

SPEEDUP_GOAL = 4.0
FLOOR_GOAL = 2.5


@dataclass
class Case:
    name: str
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]


def smooth_l1(n: int, scalar_dout: bool, rng: np.random.Generator) -> Case:
    nodes = [h.make_node("Mul", ["dout", "norm"], ["g"]), h.make_node("Sub", ["predict", "label"], ["x"]),
             h.make_node("Abs", ["x"], ["ax"]), h.make_node("Less", ["ax", "beta"], ["c"]),
             h.make_node("Mul", ["g", "x"], ["gx"]), h.make_node("Div", ["gx", "beta"], ["lin"]),
             h.make_node("Sign", ["x"], ["sx"]), h.make_node("Mul", ["g", "sx"], ["sg"]),
             h.make_node("Where", ["c", "lin", "sg"], ["gradient"])]
    inits = [h.make_tensor("beta", T.FLOAT, [], [0.5]), h.make_tensor("norm", T.FLOAT, [], [1.0 / n])]
    ins = [h.make_tensor_value_info("predict", T.FLOAT, [n]), h.make_tensor_value_info("label", T.FLOAT, [n]),
           h.make_tensor_value_info("dout", T.FLOAT, [] if scalar_dout else [n])]
    graph = h.make_graph(nodes, "sl1", ins, [h.make_tensor_value_info("gradient", T.FLOAT, [n])], initializer=inits)
    feeds = {"predict": rng.normal(size=n).astype(np.float32), "label": rng.normal(size=n).astype(np.float32),
             "dout": np.asarray(rng.normal(), np.float32) if scalar_dout else rng.normal(size=n).astype(np.float32)}
    dout = "dout 1 element" if scalar_dout else "dout full shape"
    return Case(f"SmoothL1LossGradV2 mean, {dout}", h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]),
                feeds)


def proximal(n: int, rng: np.random.Generator) -> Case:
    nodes = [h.make_node("Mul", ["delta", "alpha"], ["ad"]), h.make_node("Sub", ["var", "ad"], ["p"]),
             h.make_node("Abs", ["p"], ["ap"]), h.make_node("Mul", ["alpha", "l1"], ["t"]),
             h.make_node("Sub", ["ap", "t"], ["apt"]), h.make_node("Max", ["apt", "zero"], ["m"]),
             h.make_node("Sign", ["p"], ["sp"]), h.make_node("Mul", ["sp", "m"], ["num"]),
             h.make_node("Mul", ["alpha", "l2"], ["al2"]), h.make_node("Add", ["one", "al2"], ["den"]),
             h.make_node("Div", ["num", "den"], ["var_out"])]
    inits = [h.make_tensor("zero", T.FLOAT, [], [0.0]), h.make_tensor("one", T.FLOAT, [], [1.0])]
    ins = [h.make_tensor_value_info("var", T.FLOAT, [n]), h.make_tensor_value_info("delta", T.FLOAT, [n])]
    ins += [h.make_tensor_value_info(s, T.FLOAT, []) for s in ("alpha", "l1", "l2")]
    graph = h.make_graph(nodes, "prox", ins, [h.make_tensor_value_info("var_out", T.FLOAT, [n])], initializer=inits)
    feeds = {"var": rng.normal(size=n).astype(np.float32), "delta": rng.normal(size=n).astype(np.float32),
             "alpha": np.asarray(0.01, np.float32), "l1": np.asarray(0.1, np.float32),
             "l2": np.asarray(0.05, np.float32)}
    return Case("ApplyProximalGradientDescent, runtime scalars", h.make_model(
        graph, opset_imports=[h.make_opsetid("", 17)]), feeds)


def ort_bytes_per_element(model: onnx.ModelProto, n: int) -> float:
    """Every node reads its inputs and writes its outputs once (shapes from shape inference)."""
    inferred = shape_inference.infer_shapes(model)
    g = inferred.graph
    sizes: dict[str, int] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        t = vi.type.tensor_type
        count = int(np.prod([d.dim_value for d in t.shape.dim])) if t.shape.dim else 1
        sizes[vi.name] = count * onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).itemsize
    for init in g.initializer:
        sizes[init.name] = int(np.prod(init.dims or [1])) * 4
    return sum(sizes.get(v, 0) for node in g.node for v in list(node.input) + list(node.output)) / n


def best(fn, rounds: list[float]) -> None:
    t = time.perf_counter()
    fn()
    rounds.append(time.perf_counter() - t)


def ort_runner(case: Case, out: np.ndarray):
    """A session that runs the unfused model into `out` (IOBinding), without spinning threads."""
    so = ort.SessionOptions()
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(case.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    binding = session.io_binding()
    for name, value in case.feeds.items():
        binding.bind_cpu_input(name, value)
    binding.bind_output(session.get_outputs()[0].name, "cpu", 0, np.float32, list(out.shape), out.ctypes.data)
    return lambda: session.run_with_iobinding(binding)


def bench(case: Case, target: str, rounds: int, backend: TwinBackend) -> dict[str, object]:
    n = case.feeds[next(iter(case.feeds))].size
    fused, _ = fuse(case.model)
    node = fused_nodes(fused)[0]
    values = {**model_constants(fused), **case.feeds}
    inputs = {role: np.asarray(values[name]) for role, name in zip(OP_SPECS[node.op_type].inputs, node.input)}
    call = KernelCall(node_spec_at_runtime(node, inputs, {}), inputs, target)
    twin_out = {OP_SPECS[node.op_type].outputs[0]: np.empty(n, np.float32)}
    ort_out = np.empty(n, np.float32)
    run_ort = ort_runner(case, ort_out)

    def run_twin() -> None:
        backend.launch(call, twin_out)

    src = case.feeds[next(iter(case.feeds))]
    dst = np.empty_like(src)
    for warm in (run_twin, run_ort, lambda: np.copyto(dst, src)):
        warm()
    times: dict[str, list[float]] = {"ort": [], "twin": [], "copy": []}
    for _ in range(rounds):
        best(run_ort, times["ort"])
        best(run_twin, times["twin"])
        best(lambda: np.copyto(dst, src), times["copy"])
    t_ort, t_twin, t_copy = (min(times[k]) for k in ("ort", "twin", "copy"))
    stats = backend.last_stats
    min_bytes = sum(a.nbytes for a in inputs.values()) + n * 4
    bandwidth = 2 * src.nbytes / t_copy
    floor = min_bytes / bandwidth
    return {"kernel": case.name, "n": n, "ort": t_ort, "twin": t_twin, "speedup": t_ort / t_twin,
            "twin_bpe": (stats.gm_read_bytes + stats.gm_write_bytes) / n, "min_bpe": min_bytes / n,
            "ort_bpe": ort_bytes_per_element(case.model, n), "bandwidth": bandwidth, "floor": floor,
            "vs_floor": t_twin / floor}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=int, default=1 << 24)
    ap.add_argument("--target", default="ascend950")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    backend = TwinBackend()
    cases = [smooth_l1(args.elements, True, rng), smooth_l1(args.elements, False, rng), proximal(args.elements, rng)]
    rows = [bench(c, args.target, args.rounds, backend) for c in cases]
    print(f"twin vs onnxruntime {ort.__version__} (unfused subgraph), {args.elements} float32 elements, "
          f"target {args.target}, {backend.workers} twin worker thread(s), {os.cpu_count()} CPUs, "
          f"best of {args.rounds}")
    print()
    print("| kernel | ORT unfused ms | twin ms | speed-up | twin B/elem | min B/elem | ORT B/elem "
          "| copy GB/s | floor ms | twin / floor | goals |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    missed = []
    for r in rows:
        ok_speed = r["speedup"] >= SPEEDUP_GOAL
        ok_floor = r["vs_floor"] <= FLOOR_GOAL
        verdict = "met" if ok_speed and ok_floor else "MISSED"
        print(f"| {r['kernel']} | {r['ort'] * 1e3:.1f} | {r['twin'] * 1e3:.1f} | {r['speedup']:.1f}x "
              f"| {r['twin_bpe']:.2f} | {r['min_bpe']:.2f} | {r['ort_bpe']:.1f} | {r['bandwidth'] / 1e9:.1f} "
              f"| {r['floor'] * 1e3:.1f} | {r['vs_floor']:.2f}x | {verdict} |")
        if not ok_speed:
            missed.append(f"{r['kernel']}: {r['speedup']:.1f}x faster than onnxruntime, goal {SPEEDUP_GOAL}x "
                          f"(short by {SPEEDUP_GOAL / r['speedup']:.2f}x)")
        if not ok_floor:
            missed.append(f"{r['kernel']}: {r['vs_floor']:.2f}x the bandwidth floor, goal {FLOOR_GOAL}x "
                          f"(over by {r['vs_floor'] / FLOOR_GOAL:.2f}x)")
    print()
    print(f"Goals: >= {SPEEDUP_GOAL}x faster than onnxruntime, <= {FLOOR_GOAL}x the bandwidth floor.")
    for m in missed:
        print(f"missed: {m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
