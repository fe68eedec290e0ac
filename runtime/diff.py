"""Diff a fused model against its unfused original on the same inputs.

Rows: one per graph output (fused model run end to end, standard nodes on onnxruntime and fused
nodes on the backend, against onnxruntime on the unfused model) and one per fused node (its
kernel against onnxruntime on the node's matched subgraph, the function body, on the inputs the
node received; a node without a function body is compared with the float64 formula of
lowering/fused_ops.py, rounded once to the node's dtype as CANN's goldens are).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx

from lowering.fused_ops import OP_SPECS
from lowering.terminal import printable
from runtime.backend import Backend
from runtime.graph_exec import FusedRun, run_fused_model
from runtime.local_functions import LocalFunctions
from runtime.node_references import function_body_references
from runtime.node_runs import by_node, never_run, stacked
from runtime.ort_exec import run_model
from runtime.precision import HALF_TYPES, THRESHOLDS, Comparison, compare, rounded_to
from runtime.progress import Progress
from runtime.report import DiffReport, Row


def formula_goldens(run: FusedRun) -> dict[str, np.ndarray]:
    """The contract's float64 formula for one fused node run (lowering/fused_ops.py OP_SPECS),
    each output rounded to its dtype."""
    spec = OP_SPECS[run.spec.op_type]
    goldens = spec.golden(run.inputs, run.spec.attrs)
    with np.errstate(over="ignore", invalid="ignore"):
        return {role: np.asarray(g).astype(run.outputs[role].dtype) for role, g in zip(spec.outputs, goldens)}


def _clip_hint(nodes: list[onnx.NodeProto], actual: np.ndarray, golden: np.ndarray) -> str:
    """Explain inf mismatches where the subgraph's Clip has no max: the ONNX spec clamps at the
    dtype's largest finite value (the kernel follows it), but onnxruntime's float16 Clip lets
    inf through when it runs in place, so the reference can hold inf where the kernel does not."""
    if not any(n.op_type == "Clip" for n in nodes):
        return ""
    a, g = np.asarray(actual, np.float64), np.asarray(golden, np.float64)
    bad = (np.isinf(a) | np.isinf(g)) & (a != g) & ~np.isnan(a) & ~np.isnan(g)
    if bad.any() and np.all(np.isfinite(a[bad]) & np.isinf(g[bad]) & (np.sign(a[bad]) == np.sign(g[bad]))):
        return ("; the reference has inf where the kernel has the largest finite value: Clip without max "
                "clamps there per the ONNX spec, onnxruntime's in-place float16 Clip does not")
    return ""


def _masked_select_hint(nodes: list[onnx.NodeProto], actual: np.ndarray, golden: np.ndarray) -> str:
    """Explain NaN mismatches of a select written as arithmetic (float masks, or autograd's sum
    of Wheres against 0 times each branch's factors): where the branch not taken is inf, 0 * inf
    makes the reference NaN, while the kernel picks the branch taken (the report's caveat)."""
    if not any(n.op_type == "Where" or (n.op_type == "Cast" and n.input) for n in nodes):
        return ""
    a, g = np.asarray(actual, np.float64), np.asarray(golden, np.float64)
    bad = np.isnan(a) != np.isnan(g)
    if bad.any() and np.all(np.isnan(g[bad])):
        return ("; the reference has NaN where the kernel does not: if the report flags this fusion's "
                "arithmetic select, 0 * inf of the branch not taken is NaN in the graph (inf inputs or "
                "overflow upstream, e.g. from the large generated edge values; try --inputs)")
    return ""


def node_rows(fused: onnx.ModelProto, runs: list[FusedRun], progress: Progress | None = None) -> list[Row]:
    """One row per output of each fused node: its kernel against its function body (or the
    float64 formula when it has none). A node inside a loop body or a branch is compared in every
    run it made, on the inputs of that run, in one row that says how many runs it checked; one
    that never ran gets a row that says so."""
    functions = LocalFunctions(fused)
    refs = function_body_references(fused, runs, progress, functions)
    reference = {id(run): ref for run, ref in zip(runs, refs)}
    if progress:
        progress.stage("comparing fused nodes with their references", total=len(runs))
    rows = []
    groups = by_node(runs)
    for group in groups:
        goldens: list[tuple[dict[str, np.ndarray], str]] = []
        for run in group.runs:
            ref = reference[id(run)]
            goldens.append((ref, "matched subgraph") if ref is not None else (formula_goldens(run), "float64 formula"))
        for role in group.runs[0].outputs:
            actual = stacked([run.outputs[role] for run in group.runs])
            golden = stacked([g[role] for g, _ in goldens])
            where = goldens[0][1]
            cmp = compare(group.node.name, actual, golden)
            if (cmp.inf_mismatch or cmp.nan_mismatch) and where == "matched subgraph":
                found = functions.called_by(group.node)
                body = list(found.node) if found else []
                if cmp.inf_mismatch:
                    cmp.note += _clip_hint(body, actual, golden)
                if cmp.nan_mismatch:
                    cmp.note += _masked_select_hint(body, actual, golden)
            failed = [(k, run.error) for k, run in enumerate(group.runs) if run.error]
            if failed:
                cmp.passed = False
                k, error = failed[0]
                cmp.note = f"kernel failed: {error}" + (f" (run {k + 1} of {len(group.runs)})" if group.where else "")
            rows.append(Row("node", group.node.name, where, cmp, group.node.op_type, group.checked_in()))
        if progress:
            progress.advance(len(group.runs))
    for idle in never_run(fused, groups):
        cmp = Comparison(idle.node.name, "-", (), float("nan"), float("nan"), float("nan"), 0.0, 0, 0, True,
                         "not run on these inputs, so not checked")
        rows.append(Row("node", idle.node.name, "not run", cmp, idle.node.op_type,
                        f"not run on these inputs (in {printable(idle.where)}: a branch not taken or a loop of "
                        "no iteration), so not checked"))
    return rows


@dataclass(frozen=True)
class _Through:
    """How a graph output is computed by way of float16/bfloat16 values."""

    dtype: str  # the looser bar of the two, when both occur
    rounded_last: bool  # the output is a Cast of a value of that dtype: the graph rounds right before it


def _computed_through(model: onnx.ModelProto) -> dict[str, _Through]:
    """Graph outputs the model computes by way of float16/bfloat16 values. A float32 output of a
    float16 computation (onnxconverter-common's keep_io_types) carries float16's rounding, which
    onnxruntime's CPU reference leaves out: it runs float16 chains in float32."""
    try:
        typed = onnx.shape_inference.infer_shapes(model)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, ValueError):
        typed = model
    graph = typed.graph
    types = {vi.name: vi.type.tensor_type.elem_type for vi in list(graph.value_info) + list(graph.output)}
    producers = {o: n for n in graph.node for o in n.output}
    # one forward pass in the graph's (topological) order: each value's half dtypes on the way to it
    via: dict[str, frozenset[str]] = {}
    none: frozenset[str] = frozenset()
    for node in graph.node:
        found = none.union(*(via.get(n, none) for n in node.input),
                           (HALF_TYPES[types[o]] for o in node.output if types.get(o) in HALF_TYPES))
        via.update(dict.fromkeys(node.output, found))
    out: dict[str, _Through] = {}
    for output in graph.output:
        found = via.get(output.name, none)
        if found:
            dtype = max(found, key=THRESHOLDS.__getitem__)
            last = producers.get(output.name)
            rounded = (last is not None and last.op_type == "Cast" and bool(last.input)
                       and HALF_TYPES.get(types.get(last.input[0], onnx.TensorProto.UNDEFINED)) == dtype)
            out[output.name] = _Through(dtype, rounded)
    return out


def diff_models(unfused: onnx.ModelProto, fused: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
                backend: Backend, target: str, report: DiffReport,
                progress: Progress | None = None) -> DiffReport:
    """Fill `report.rows` with the comparisons of `fused` against `unfused` on `feeds`."""
    if progress:
        progress.stage("onnxruntime: unfused model")
    golden = run_model(unfused, feeds)
    actual, runs = run_fused_model(fused, feeds, backend, target, progress)
    if progress:
        progress.stage("comparing graph outputs")
    through = _computed_through(unfused)
    for out in unfused.graph.output:
        if out.name not in actual:
            missing = compare(out.name, np.zeros(0), np.zeros(1))
            missing.note = "the fused model has no such output"
            report.rows.append(Row("output", out.name, "unfused graph", missing))
            continue
        way = through.get(out.name)
        gold = golden[out.name]
        if way is not None and way.rounded_last:
            gold = rounded_to(gold, way.dtype)
        cmp = compare(out.name, actual[out.name], gold, None if way is None else way.dtype)
        if way is not None and way.rounded_last:
            rounded = f"reference rounded to {way.dtype} as the graph's last Cast does"
            cmp.note = "; ".join(filter(None, [cmp.note, rounded]))
        if cmp.inf_mismatch:
            cmp.note += _clip_hint(list(unfused.graph.node), actual[out.name], golden[out.name])
        if cmp.nan_mismatch:
            cmp.note += _masked_select_hint(list(unfused.graph.node), actual[out.name], golden[out.name])
        report.rows.append(Row("output", out.name, "unfused graph", cmp))
    report.rows += node_rows(fused, runs, progress)
    return report
