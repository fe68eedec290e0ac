"""If, Loop and Scan as the ONNX spec defines them, run one body call at a time.

A node whose bodies hold fused nodes cannot go to onnxruntime whole (the fused nodes must run on
the backend, in every iteration and in the branch taken), so runtime/graph_exec.py runs it here.
Each function below takes the node, the values it reads and `call`, which runs a body (named by
its graph attribute) on the values of its formal inputs and returns the body's outputs in order
(a body also reads outer values by name, which `call` provides). Only the semantics live here;
how a body runs is the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper

from contracts.errors import ToolError
from lowering.onnx_values import attr
from lowering.terminal import printable

Call = Callable[[str, Sequence[np.ndarray]], list[np.ndarray]]  # (graph attribute, formal inputs) -> outputs


class ControlFlowError(ToolError, RuntimeError):
    """A control-flow node that cannot be run as given; one line naming it."""


def _graph(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    for a in node.attribute:
        if a.name == name and a.type == onnx.AttributeProto.GRAPH:
            return a.g
    raise ControlFlowError(f"{node.op_type} node '{printable(node.name)}' has no {name} graph")


def _scalar(value: np.ndarray) -> bool | int:
    arr = np.asarray(value)
    if arr.size != 1:
        raise ControlFlowError(f"a loop bound or condition has {arr.size} elements, not one")
    return arr.reshape(-1)[0].item()


def _empty(body: onnx.GraphProto, k: int, axis: int = 0) -> np.ndarray:
    """A scan output of no iteration: empty along its new axis, of the body output's dtype and,
    where the body declares every dim, its shape."""
    tt = body.output[k].type.tensor_type
    dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type) if tt.elem_type else np.dtype(np.float32)
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    if not tt.HasField("shape") or None in dims:
        return np.zeros((0,), dtype)
    shape = [int(d) for d in dims if d is not None]
    shape.insert(axis % (len(shape) + 1), 0)
    return np.zeros(tuple(shape), dtype)


def run_if(node: onnx.NodeProto, read: Mapping[str, np.ndarray], call: Call) -> list[np.ndarray]:
    """The outputs of the branch the condition takes."""
    taken = "then_branch" if _scalar(read[node.input[0]]) else "else_branch"
    return call(taken, [])


def run_loop(node: onnx.NodeProto, read: Mapping[str, np.ndarray], call: Call) -> list[np.ndarray]:
    """The final carried values, then each scan output stacked along a new first axis.

    Runs while the iteration number is below M (when given) and the condition holds (when
    given; without a condition input, the body's condition output is ignored)."""
    body = _graph(node, "body")
    inputs = list(node.input) + [""] * max(0, 2 - len(node.input))
    limit = int(_scalar(read[inputs[0]])) if inputs[0] else None
    has_cond = bool(inputs[1])
    cond = np.asarray(read[inputs[1]], np.bool_) if has_cond else np.array(True)
    carried = [np.asarray(read[name]) for name in inputs[2:]]
    n_scans = len(body.output) - 1 - len(carried)
    scans: list[list[np.ndarray]] = [[] for _ in range(n_scans)]
    i = 0
    while (limit is None or i < limit) and (not has_cond or bool(_scalar(cond))):
        out = call("body", [np.array(i, np.int64), np.asarray(cond, np.bool_).reshape(()), *carried])
        cond = out[0]
        carried = out[1:1 + len(carried)]
        for k, value in enumerate(out[1 + len(carried):]):
            scans[k].append(np.asarray(value))
        i += 1
    stacked = [np.stack(values) if values else _empty(body, 1 + len(carried) + k) for k, values in enumerate(scans)]
    return carried + stacked


def run_scan(node: onnx.NodeProto, read: Mapping[str, np.ndarray], call: Call) -> list[np.ndarray]:
    """Scan (opset 9 and later): the final states, then the scan outputs stacked along their axes."""
    body = _graph(node, "body")
    n_scan = int(attr(node, "num_scan_inputs", 0))
    states = [np.asarray(read[name]) for name in node.input[:len(node.input) - n_scan]]
    scanned = [np.asarray(read[name]) for name in node.input[len(node.input) - n_scan:]]
    in_axes = list(attr(node, "scan_input_axes", []) or [0] * n_scan)
    in_dirs = list(attr(node, "scan_input_directions", []) or [0] * n_scan)
    n_out = len(body.output) - len(states)
    out_axes = list(attr(node, "scan_output_axes", []) or [0] * n_out)
    out_dirs = list(attr(node, "scan_output_directions", []) or [0] * n_out)
    axes = [int(a) % x.ndim if x.ndim else 0 for a, x in zip(in_axes, scanned)]
    lengths = {x.shape[a] for x, a in zip(scanned, axes)}
    if len(lengths) > 1:
        raise ControlFlowError(f"Scan node '{printable(node.name)}': its scanned inputs have different lengths "
                               f"{sorted(lengths)}")
    length = lengths.pop() if lengths else 0
    collected: list[list[np.ndarray]] = [[] for _ in range(n_out)]
    for t in range(length):
        slices = [np.take(x, length - 1 - t if d else t, axis=a) for x, a, d in zip(scanned, axes, in_dirs)]
        out = call("body", [*states, *slices])
        states = out[:len(states)]
        for k, value in enumerate(out[len(states):]):
            collected[k].append(np.asarray(value))
    outputs = list(states)
    for k, values in enumerate(collected):
        if not values:
            outputs.append(_empty(body, len(states) + k, int(out_axes[k])))
            continue
        if out_dirs[k]:
            values = values[::-1]
        outputs.append(np.stack(values, axis=int(out_axes[k]) % (values[0].ndim + 1)))
    return outputs


RUNNERS: dict[str, Callable[[onnx.NodeProto, Mapping[str, np.ndarray], Call], list[np.ndarray]]] = {
    "If": run_if, "Loop": run_loop, "Scan": run_scan}
