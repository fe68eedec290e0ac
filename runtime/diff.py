"""Diff a fused model against its unfused original on the same inputs.

Rows: one per graph output (fused model run end to end, standard nodes on onnxruntime and fused
nodes on the backend, against onnxruntime on the unfused model) and one per fused node (its
kernel against onnxruntime on the node's matched subgraph, the function body, on the inputs the
node received; a node without a function body, or with one onnxruntime cannot run, is compared
with the float64 formula of contracts/fused_ops.py, rounded once to the node's dtype as CANN's
goldens are), plus one per input a node of the unfused graph writes in place (an accumulator's
buffer). Where onnxruntime cannot run the unfused graph whole (runtime/coverage.py), the graphs
run as far as onnxruntime and lower's own ops (runtime/contrib_ops.py) take them, comparisons
that need a value nothing computes are SKIP rows, and report.partial says so in one line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from contracts.fused_ops import OP_SPECS
from lowering.terminal import printable
from runtime.backend import Backend
from runtime.coverage import OrtOps, plan
from runtime.graph_exec import FusedRun, GraphRun, run_graph
from runtime.local_functions import LocalFunctions
from runtime.node_references import function_body_references
from runtime.node_runs import by_node, never_run, node_key, positions, stacked
from runtime.ort_exec import run_model
from runtime.partial import describe_partial
from runtime.precision import HALF_TYPES, THRESHOLDS, Comparison, compare, rounded_to
from runtime.progress import Progress
from runtime.report import DiffReport, Row


def formula_goldens(run: FusedRun) -> dict[str, np.ndarray]:
    """The contract's float64 formula for one fused node run (contracts/fused_ops.py OP_SPECS),
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


def nonfinite_positions(golden: np.ndarray, inputs: Sequence[np.ndarray] = ()) -> np.ndarray:
    """Where the reference, or an input broadcast to its shape, is +-inf or NaN: what a diff
    under assume-finite leaves out."""
    g = np.asarray(golden)
    out = ~np.isfinite(g.astype(np.float64)) if g.dtype.kind == "f" or g.dtype.name == "bfloat16" \
        else np.zeros(g.shape, bool)
    for x in inputs:
        a = np.asarray(x)
        if a.dtype.kind != "f" and a.dtype.name != "bfloat16":
            continue
        try:
            out = out | np.broadcast_to(~np.isfinite(a.astype(np.float64)), g.shape)
        except ValueError:  # an input of another shape names no position of this output
            continue
    return out


def node_rows(fused: onnx.ModelProto, runs: list[FusedRun], progress: Progress | None = None,
              not_run: Sequence[tuple[onnx.NodeProto, str]] = (), assume_finite: bool = False) -> list[Row]:
    """One row per output of each fused node, in graph order (a node inside a body where the
    main-graph node that holds it is): its kernel against its function body (or the float64
    formula when it has none, or one that onnxruntime cannot run). A node inside a loop body or a
    branch is compared in every run it made, on the inputs of that run, in one row that says how
    many runs it checked. A SKIP row for each node in `not_run` (with why its inputs cannot be
    computed), and for each node inside a body that never ran on these inputs."""
    functions = LocalFunctions(fused)
    ort = OrtOps(fused, functions)
    groups = by_node(runs)
    foreign = {id(g) for g in groups if (fn := functions.called_by(g.node)) is not None and not ort.runs_all(fn.node)}
    index = {id(run): k for k, run in enumerate(runs)}
    refs = function_body_references(fused, runs, progress, functions,
                                    skip={index[id(run)] for g in groups if id(g) in foreign for run in g.runs})
    reference = {id(run): ref for run, ref in zip(runs, refs)}
    if progress:
        progress.stage("comparing fused nodes with their references", total=len(runs))
    position = positions(fused)
    rows: list[tuple[int, Row]] = []
    for group in groups:
        goldens: list[tuple[dict[str, np.ndarray], str]] = []
        for run in group.runs:
            ref = reference[id(run)]
            goldens.append((ref, "matched subgraph") if ref is not None else (formula_goldens(run), "float64 formula"))
        partial = ("its matched subgraph holds ops onnxruntime cannot run: held to the float64 formula"
                   if id(group) in foreign else "")
        for role in group.runs[0].outputs:
            actual = stacked([run.outputs[role] for run in group.runs])
            golden = stacked([g[role] for g, _ in goldens])
            where = goldens[0][1]
            skip = None
            if assume_finite:
                skip = stacked([nonfinite_positions(g[role], list(run.inputs.values()))
                                for (g, _), run in zip(goldens, group.runs)])
            cmp = compare(group.node.name, actual, golden, skip=skip)
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
            rows.append((position.get(node_key(group.node), -1),
                         Row("node", group.node.name, where, cmp, group.node.op_type, partial=partial,
                             checked=group.checked_in())))
        if progress:
            progress.advance(len(group.runs))
    rows += [(position.get(node_key(node), -1), _skipped("node", node.name, "matched subgraph", why, node.op_type))
             for node, why in not_run]
    left_out = {node_key(node) for node, _ in not_run}
    for idle in never_run(fused, groups):
        if node_key(idle.node) in left_out:
            continue
        why = (f"not run on these inputs (in {printable(idle.where)}: a branch not taken or a loop of "
               "no iteration), so not checked")
        row = _skipped("node", idle.node.name, "not run", why, idle.node.op_type)
        row.checked = why
        rows.append((position.get(node_key(idle.node), -1), row))
    rows.sort(key=lambda item: item[0])  # stable: a body's nodes keep their order
    return [row for _, row in rows]


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


def _skipped(kind: str, name: str, reference: str, why: str, op_type: str = "") -> Row:
    nan = float("nan")
    cmp = Comparison(name, "", (), nan, nan, nan, nan, 0, 0, False, why)
    return Row(kind, name, reference, cmp, op_type, skipped=why)


def _rests_on(via: frozenset[str]) -> str:
    return (f"rests on lower's {', '.join(sorted(via))} (runtime/contrib_ops.py), which onnxruntime cannot run"
            if via else "")


def _unfused_run(unfused: onnx.ModelProto, feeds: Mapping[str, np.ndarray], backend: Backend, target: str,
                 progress: Progress | None) -> GraphRun:
    """The reference run: one onnxruntime session over the whole model, or, when onnxruntime
    cannot run some of its nodes, run_graph's mix of onnxruntime and lower's own ops."""
    cov = plan(unfused, kernels=False)
    if cov.complete:
        if progress:
            progress.stage("onnxruntime: unfused model")
        return GraphRun(run_model(unfused, feeds), [], cov)
    return run_graph(unfused, feeds, backend, target, progress, what="unfused model", kernels=False)


def diff_models(unfused: onnx.ModelProto, fused: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
                backend: Backend, target: str, report: DiffReport,
                progress: Progress | None = None, assume_finite: bool = False) -> DiffReport:
    """Fill `report.rows` with the comparisons of `fused` against `unfused` on `feeds`; where
    onnxruntime cannot run the unfused graph whole, also `report.partial` (runtime/partial.py)."""
    reference = _unfused_run(unfused, feeds, backend, target, progress)
    golden = reference.outputs
    run = run_graph(fused, feeds, backend, target, progress)
    actual = run.outputs
    if progress:
        progress.stage("comparing graph outputs")
    through = _computed_through(unfused)
    for out in unfused.graph.output:
        why = reference.missing.get(out.name) or run.missing.get(out.name)
        if why:
            report.rows.append(_skipped("output", out.name, "unfused graph", why))
            continue
        if out.name not in actual:
            missing = compare(out.name, np.zeros(0), np.zeros(1))
            missing.note = "the fused model has no such output"
            report.rows.append(Row("output", out.name, "unfused graph", missing))
            continue
        way = through.get(out.name)
        gold = golden[out.name]
        if way is not None and way.rounded_last:
            gold = rounded_to(gold, way.dtype)
        skip = nonfinite_positions(gold, list(feeds.values())) if assume_finite else None
        cmp = compare(out.name, actual[out.name], gold, None if way is None else way.dtype, skip=skip)
        if way is not None and way.rounded_last:
            rounded = f"reference rounded to {way.dtype} as the graph's last Cast does"
            cmp.note = "; ".join(filter(None, [cmp.note, rounded]))
        if cmp.inf_mismatch:
            cmp.note += _clip_hint(list(unfused.graph.node), actual[out.name], golden[out.name])
        if cmp.nan_mismatch:
            cmp.note += _masked_select_hint(list(unfused.graph.node), actual[out.name], golden[out.name])
        via = reference.coverage.via.get(out.name, frozenset()) | run.coverage.via.get(out.name, frozenset())
        report.rows.append(Row("output", out.name, "unfused graph", cmp, partial=_rests_on(via)))
    report.rows += update_rows(reference, run)
    report.rows += node_rows(fused, run.runs, progress, run.not_run, assume_finite)
    if not reference.coverage.complete:
        report.partial, report.partial_detail = describe_partial(report.rows, reference.coverage)
    return report


def update_rows(reference: GraphRun, run: GraphRun) -> list[Row]:
    """One row per input that a node of the unfused graph writes in place (an accumulator's
    buffer): onnxruntime-training's graphs hand a gradient to the training loop only that way."""
    rows = []
    for name, want in reference.updates.items():
        got = run.updates.get(name)
        if got is None:
            cmp = compare(name, np.zeros(0), np.zeros(1))
            cmp.note = f"the fused model does not update it (the unfused graph's {want.op} does)"
            rows.append(Row("update", name, "unfused graph", cmp))
            continue
        cmp = compare(name, got.value, want.value)
        rows.append(Row("update", name, "unfused graph", cmp, want.op, partial=_rests_on(want.via | got.via)))
    return rows
