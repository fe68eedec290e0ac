"""Model-local functions: patterns inside them are found by inlining their calls first.

TorchScript's `export_modules_as_functions` and hand-written onnxscript models keep module bodies
in model-local functions, where a pass over the main graph never looks. The calls of every
function that could hold a pattern (its body, or a function it calls, has an op every pattern
needs) are inlined with onnx's own inliner and the pass runs on the result. What the fusions took
decides what stays inlined: only the functions whose nodes a fusion took (and the functions whose
calls lead to them), so the model keeps every function that held nothing to fuse.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

import onnx
import onnx.inliner

from contracts.errors import LoweringError
from contracts.fused_ops import DOMAIN

from .graph import node_label
from .report import FusionReport, Rejection

# every form of both families has one of these (a sign, a select, a clamp or an absolute value)
SEED_OPS = frozenset({"Sign", "Where", "Clip", "Min", "Max", "Abs", "Relu"})
# metadata key that marks, on the pass's working copy only, the function each inlined node came from
_ORIGIN = "lowering.inlined_from"

Key = tuple[str, str]  # (domain, name) of a model-local function
Run = Callable[[onnx.ModelProto], tuple[onnx.ModelProto, FusionReport]]


def _calls(nodes: Iterable[onnx.NodeProto], local: dict[Key, onnx.FunctionProto]) -> set[Key]:
    return {key for n in nodes if (key := (n.domain, n.op_type)) in local}


def _local(model: onnx.ModelProto) -> dict[Key, onnx.FunctionProto]:
    # the fused ops' own functions are the result of an earlier run: never looked into again
    return {(f.domain, f.name): f for f in model.functions if f.domain != DOMAIN}


def _calls_within(nodes: Iterable[onnx.NodeProto], local: dict[Key, onnx.FunctionProto]) -> set[Key]:
    """The local functions these nodes call, also from inside their If/Loop/Scan bodies."""
    found: set[Key] = set()
    stack = [list(nodes)]
    while stack:
        for node in stack.pop():
            if (node.domain, node.op_type) in local:
                found.add((node.domain, node.op_type))
            for a in node.attribute:
                stack.extend(list(g.node) for g in ([a.g] if a.HasField("g") else []) + list(a.graphs))
    return found


def check_not_recursive(model: onnx.ModelProto) -> None:
    """LoweringError when a local function calls itself, directly or not (also from inside an
    If or Loop body): ONNX forbids it, and the checker lets it through below IR version 8."""
    local = _local(model)
    calls = {key: _calls_within(f.node, local) for key, f in local.items()}
    done: set[Key] = set()
    for start in sorted(calls):
        path: list[Key] = []
        on_path: set[Key] = set()
        stack: list[tuple[Key, bool]] = [(start, False)]
        while stack:
            key, leaving = stack.pop()
            if leaving:
                path.pop()
                on_path.discard(key)
                done.add(key)
                continue
            if key in on_path:
                cycle = path[path.index(key):] + [key]
                raise LoweringError("the model is invalid: its local functions call themselves ("
                                    + " -> ".join(f"{d}.{n}" for d, n in cycle) + ")")
            if key in done:
                continue
            path.append(key)
            on_path.add(key)
            stack.append((key, True))
            stack.extend((callee, False) for callee in sorted(calls[key]))


def candidates(model: onnx.ModelProto) -> list[Key]:
    """The local functions, reachable from the main graph, whose calls must be inlined to show a
    pattern: those with a seed op in their body or in a function they call."""
    local = _local(model)
    if not local:
        return []
    reachable: list[Key] = []
    stack = sorted(_calls(model.graph.node, local))
    while stack:
        key = stack.pop()
        if key in reachable:
            continue
        reachable.append(key)
        stack.extend(sorted(_calls(local[key].node, local)))
    seeded = {key for key in reachable if _has_seed(local[key].node)}
    return [key for key in reachable if key in _with_callers(seeded, reachable, local)]


def _has_seed(nodes: Iterable[onnx.NodeProto]) -> bool:
    """Whether the nodes, or those of their If/Loop/Scan bodies, have an op every pattern needs."""
    stack = [list(nodes)]
    while stack:
        for node in stack.pop():
            if node.op_type in SEED_OPS and node.domain in ("", "ai.onnx"):
                return True
            for a in node.attribute:
                stack.extend(list(g.node) for g in ([a.g] if a.HasField("g") else []) + list(a.graphs))
    return False


def _with_callers(keys: set[Key], among: list[Key], local: dict[Key, onnx.FunctionProto]) -> set[Key]:
    """keys and every function among `among` that calls one of them, directly or not."""
    out = set(keys)
    changed = True
    while changed:
        changed = False
        for key in among:
            if key not in out and _calls(local[key].node, local) & out:
                out.add(key)
                changed = True
    return out


def _inline(model: onnx.ModelProto, keys: list[Key], tagged: bool) -> onnx.ModelProto | None:
    """The model with the calls of `keys` inlined; None when onnx's inliner cannot do it (the
    pass then works on the main graph as it is). `tagged` marks each inlined node with the
    function it came from (onnx's inliner carries node metadata along)."""
    source = model
    if tagged:
        source = onnx.ModelProto()
        source.CopyFrom(model)
        for f in source.functions:
            if (f.domain, f.name) in keys:
                for n in f.node:
                    n.metadata_props.add(key=_ORIGIN, value=f"{f.domain}\n{f.name}")
    try:
        return onnx.inliner.inline_selected_functions(source, keys, exclude=False)
    except Exception:  # noqa: BLE001 - any failure of the inliner means: do not look inside
        return None


def _origins(inlined: onnx.ModelProto) -> dict[str, Key]:
    """node_label -> the function it came from, for the nodes of a tagged inlining (the nodes in
    the If/Loop/Scan bodies of an inlined node came from its function too)."""
    out: dict[str, Key] = {}
    for n in inlined.graph.node:
        for p in n.metadata_props:
            if p.key == _ORIGIN:
                domain, name = p.value.split("\n", 1)
                out[node_label(n)] = (domain, name)
                stack = [a.g for a in n.attribute if a.HasField("g")] + [g for a in n.attribute for g in a.graphs]
                while stack:
                    body = stack.pop()
                    for inner in body.node:
                        out[node_label(inner)] = (domain, name)
                        stack.extend([a.g for a in inner.attribute if a.HasField("g")]
                                     + [g for a in inner.attribute for g in a.graphs])
    return out


def _drop_origins(model: onnx.ModelProto) -> None:
    """Removes the origin marks of a tagged inlining from the main graph's nodes."""
    for n in model.graph.node:
        kept = [(p.key, p.value) for p in n.metadata_props if p.key != _ORIGIN]
        if len(kept) != len(n.metadata_props):
            del n.metadata_props[:]
            for key, value in kept:
                n.metadata_props.add(key=key, value=value)


def _inlined_report(report: FusionReport, model: onnx.ModelProto, keys: list[Key]) -> FusionReport:
    """The report of a pass over an inlined model, told what was inlined; its node counts start
    from the model's own main graph."""
    report.inlined_functions = [_name(key) for key in keys]
    report.nodes_inlined, report.nodes_before = report.nodes_before, len(model.graph.node)
    return report


def _name(key: Key) -> str:
    return f"{key[0]}.{key[1]}" if key[0] else key[1]


def fuse_through_functions(model: onnx.ModelProto, run: Run) -> tuple[onnx.ModelProto, FusionReport]:
    """`run` (the pass on one model) on `model`, looking inside its local functions.

    1. The calls of every candidate are inlined, each node tagged with its function, and `run`
       shows which functions' nodes the fusions take.
    2. None: `run` on the model as it is; the near misses inside functions join its report.
    3. Some: only those functions (and the ones whose calls lead to them) are inlined, untagged,
       and `run` on that is the result. When those are all the candidates, or should it fuse less
       than step 1 did (it cannot, short of a fusion that needed a function step 1 took for no
       node), step 1's result without its marks is the result.
    """
    check_not_recursive(model)
    keys = candidates(model)
    tagged = _inline(model, keys, tagged=True) if keys else None
    if tagged is None:
        return run(model)
    try:
        first_model, first = run(tagged)
    except LoweringError:  # whatever the inlined graph trips on, the model as it is may still fuse
        return run(model)
    origin = _origins(tagged)

    def near_misses_outside(selection: list[Key]) -> list[Rejection]:
        """Step 1's near misses inside the functions that stay functions."""
        return [replace(r, reason=f"inside local function {_name(origin[r.anchor])}: {r.reason}")
                for r in first.rejections if r.anchor in origin and origin[r.anchor] not in selection]

    took = {origin[label] for f in first.fusions for label in f.replaced_nodes if label in origin}
    if not took:
        fused, report = run(model)
        report.rejections += near_misses_outside([])
        return fused, report
    chosen = [key for key in keys if key in _with_callers(took, keys, _local(model))]
    inlined = _inline(model, chosen, tagged=False) if chosen != keys else None
    if inlined is not None:
        fused, report = run(inlined)
        if len(report.fusions) >= len(first.fusions):
            report.rejections += near_misses_outside(chosen)
            return fused, _inlined_report(report, model, chosen)
    # every candidate inlined, as step 1 did: its result without the marks is the answer
    _drop_origins(first_model)
    return first_model, _inlined_report(first, model, keys)
