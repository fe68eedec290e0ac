"""onnxruntime on the function bodies of fused nodes: the reference each kernel is held to.

All fused nodes of a run share one reference model (or a few, when their inputs are large):
one call of each node's function on that node's recorded inputs, its outputs exported, and only
the local functions those calls need. One session per node, each loaded with every function of
the model, made a diff quadratic in the number of fused nodes.
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Sequence

import numpy as np
import onnx
from onnx import helper

from contracts.fused_ops import OP_SPECS
from runtime.graph_exec import FusedRun, value_info
from runtime.local_functions import LocalFunctions
from runtime.ort_exec import run_model
from runtime.progress import Progress

# Input elements one reference model takes at most (a single larger node still gets its own):
# bounds what onnxruntime holds at once, while small nodes by the thousand share one session.
BATCH_ELEMENTS = 1 << 24


def _call(node: onnx.NodeProto, fn: onnx.FunctionProto, k: int, taken: set[str]
          ) -> tuple[onnx.NodeProto, list[str], list[str]]:
    """Node `node` as call number k: its attributes the function declares, inputs and outputs
    renamed to r<k>_in_<j> / r<k>_out_<j>, so calls never share a value, and a name not in
    `taken` (onnxruntime refuses two nodes of one name; a model may still have them)."""
    declared = set(fn.attribute) | {a.name for a in fn.attribute_proto}
    call = onnx.NodeProto()
    call.CopyFrom(node)
    copy = 0
    while call.name in taken:
        copy += 1
        call.name = f"{node.name}~{copy}"
    if call.name:
        taken.add(call.name)
    del call.attribute[:]
    call.attribute.extend(a for a in node.attribute if a.name in declared)
    call.input[:] = [f"r{k}_in_{j}" for j in range(len(node.input))]
    call.output[:] = [f"r{k}_out_{j}" for j in range(len(node.output))]
    return call, list(call.input), list(call.output)


def _batches(runs: Sequence[FusedRun]) -> Iterator[list[int]]:
    """Positions of the runs, grouped so a group's inputs stay under BATCH_ELEMENTS."""
    group: list[int] = []
    size = 0
    for k, run in enumerate(runs):
        n = sum(int(np.asarray(v).size) for v in run.inputs.values())
        if group and size + n > BATCH_ELEMENTS:
            yield group
            group, size = [], 0
        group.append(k)
        size += n
    if group:
        yield group


def function_body_references(model: onnx.ModelProto, runs: Sequence[FusedRun],
                             progress: Progress | None = None, functions: LocalFunctions | None = None,
                             skip: Container[int] = ()) -> list[dict[str, np.ndarray] | None]:
    """For each run, onnxruntime's outputs of its node's function body on the run's inputs, by
    contract output name (OP_SPECS); None for a node without a function body and for the runs
    at positions in `skip` (a body onnxruntime cannot run). `functions`: the model's
    LocalFunctions, when the caller has them already."""
    functions = functions or LocalFunctions(model)
    found = [(k, run, None if k in skip else functions.called_by(run.node)) for k, run in enumerate(runs)]
    with_body = [(k, run, fn) for k, run, fn in found if fn is not None]
    refs: list[dict[str, np.ndarray] | None] = [None] * len(runs)
    if progress:
        progress.stage("onnxruntime: fused nodes' function bodies", total=len(with_body))
    for group in _batches([run for _, run, _ in with_body]):
        calls: list[onnx.NodeProto] = []
        feeds: dict[str, np.ndarray] = {}
        outputs: list[list[str]] = []
        taken: set[str] = set()
        for k in group:
            _, run, body = with_body[k]
            call, ins, outs = _call(run.node, body, k, taken)
            calls.append(call)
            op = OP_SPECS[run.node.op_type]
            feeds.update((name, np.asarray(run.inputs[role])) for name, role in zip(ins, op.inputs))
            outputs.append(outs)
        graph = helper.make_graph(calls, "fused_node_references", [value_info(n, a) for n, a in feeds.items()],
                                  [onnx.ValueInfoProto(name=o) for outs in outputs for o in outs])
        ref = helper.make_model(graph, opset_imports=list(model.opset_import), functions=functions.needed_by(calls))
        ref.ir_version = model.ir_version
        result = run_model(ref, feeds)
        for k, outs in zip(group, outputs):
            index, run, _ = with_body[k]
            op = OP_SPECS[run.node.op_type]
            refs[index] = {role: result[o] for role, o in zip(op.outputs, outs)}
        if progress:
            progress.advance(len(group))
    return refs
