"""The graph pass: decode -> normalize -> match -> check -> replace each match by one
custom-domain node -> assemble the output model.

Nodes are decoded from protobuf once (lowering.graph.Node) and every stage works on that list;
the output reuses the input's protos for every node the pass did not change. Each fused node
carries a model-local ONNX function (same op type, one overload per node) whose body is the
matched subgraph, so onnxruntime and any other ONNX runtime still run the model.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter

import numpy as np
import onnx
from onnx import helper, numpy_helper

from contracts.errors import InternalError
from contracts.fused_ops import DOMAIN, DOMAIN_VERSION, OP_SPECS

from . import cleanup, functions, verify
from .algebra import Algebra
from .beside import Beside
from .bodies import FunctionBodies
from .graph import DTYPE_NAMES, GraphIndex, GraphInfo, Node, decode_nodes, node_label
from .loading import default_opset
from .normalize import normalize
from .patterns import DEFAULT_PATTERNS, meaning
from .patterns.base import Match, NoMatch, Pattern, same_shape
from .patterns.meaning.evaluate import ELEMENTWISE
from .proof.beside import proving_child
from .proof.prove import Verdict, save_proofs
from .proof.prove import prove as prove_match
from .report import Fusion, FusionReport, Rejection
from .subgraphs import Naming, fuse_with_subgraphs

FUNCTION_IR_VERSION = 10  # node/function `overload` needs IR version 10
# the least graph whose form matches a child proves: below it the fork and the hand-over cost more
# than the proofs they move (lowering.proof.beside)
BESIDE_MIN_NODES = 20_000


def fuse_proto(model: onnx.ModelProto, patterns: Sequence[Pattern] = DEFAULT_PATTERNS,
               validated: bool = True, recompute_shared: bool = True,
               by_meaning: bool = True, assume_finite: bool = False,
               beside: bool = False) -> tuple[onnx.ModelProto, FusionReport]:
    """Fuses a ModelProto; returns a new model and the report. The input is not modified.

    Calls of model-local functions that could hold a pattern are inlined first; only those whose
    nodes a fusion took stay inlined (lowering.functions). The bodies of If, Loop and Scan nodes
    are fused as graphs of their own (lowering.subgraphs).

    `validated` says the ONNX checker has accepted the model. When it is still running
    (lowering.loading.BackgroundCheck), the pass first checks the graph's order itself, so that
    it ends on any input; the caller then takes the checker's verdict over the result.

    `recompute_shared` (the default) lets a match whose intermediates the rest of the graph also
    reads fuse anyway: the matched nodes that compute them stay in the graph for those readers,
    cheap elementwise values computed twice, which the fusion's caveat counts; without it such a
    match is refused. A match whose output meets those readers again within a few elementwise
    nodes is refused either way: it is a piece of a larger function.

    `by_meaning` runs the recogniser (lowering.patterns.meaning) on the kink ops the patterns left.

    Every match, however found, is fused only when lowering.proof proves it computes its fused
    op's contract; `assume_finite` waives a difference at +-inf and NaN inputs only (the
    report says so per fusion). `beside` lets a large graph's pass hand work to forked children
    (its form matches' proofs, part of the recogniser's; lowering.beside): for a process that is
    the pass's own, never a caller's.
    """
    # the pass allocates millions of small objects that never form cycles; the cyclic collector
    # only adds work that grows faster than the graph
    enabled = gc.isenabled()
    gc.disable()
    try:
        def one_graph(graph_model: onnx.ModelProto, naming: Naming) -> tuple[onnx.ModelProto, FusionReport]:
            return _fuse_proto(graph_model, patterns, validated, recompute_shared, by_meaning, naming, assume_finite,
                               beside)

        return functions.fuse_through_functions(model, lambda m: fuse_with_subgraphs(m, one_graph))
    finally:
        save_proofs()
        if enabled:
            gc.enable()


def _fuse_proto(model: onnx.ModelProto, patterns: Sequence[Pattern], validated: bool, recompute_shared: bool = True,
                by_meaning: bool = True, naming: Naming | None = None, assume_finite: bool = False,
                beside: bool = False) -> tuple[onnx.ModelProto, FusionReport]:
    """The pass on one graph: the model's main graph, or a subgraph as lowering.subgraphs makes a
    model of it. `naming` holds the names the other graphs of the model use and made. With
    `beside`, a large graph's form matches are proved in a child, and the recogniser shares its
    work with one (lowering.proof.beside)."""
    info = GraphInfo(model)
    report = FusionReport(nodes_before=len(model.graph.node))
    decoded = decode_nodes(model.graph)
    if naming is not None:
        naming.see(n.op_type for n in decoded)
    info.types.attach(decoded)
    if not validated:
        verify.check_input_order(decoded, info.graph_inputs | info.initializers.keys())
    normalized = normalize(decoded, info)
    stats = normalized.stats
    report.normalization = stats.as_dict()
    nodes = normalized.nodes
    index = GraphIndex(nodes, info, normalized.folded)
    dead = cleanup.drop_dead(index)
    if dead:
        report.normalization["dead nodes removed"] = len(dead)
    alg = Algebra(index)
    matches: list[Match] = []
    by_op: dict[str, list[Pattern]] = {}
    for p in patterns:
        for op in p.anchors:
            by_op.setdefault(op, []).append(p)
    explained: dict[str, set[int]] = {}  # per pattern: nodes an earlier, wider attempt already reported

    def accept(m: Match) -> Match:
        return _proved(alg, _check_closed(index, alg, m, stats.cse_shared, recompute_shared), assume_finite)

    taken_before = set(alg.taken)

    def prove_in_turn(m: Match) -> Verdict:
        """A form match taken on trust, proved with the nodes taken as when a proof in line runs
        (the earlier matches'), for a proof reads what is taken: in the child, or here when the
        child failed (_settle)."""
        verdict = prove_match(alg, m, assume_finite)
        alg.taken |= m.interior
        return verdict

    prover: Beside[Match, Verdict] | None = None
    wants_prover = beside and len(nodes) >= BESIDE_MIN_NODES
    try:
        def accept_form(m: Match) -> Match:
            nonlocal prover, wants_prover
            if wants_prover:
                # forked at the first match, not before: a graph without one needs no child, and
                # the child starts with what matching it worked out (the types inferred of a
                # graph without value_info, which it would otherwise infer again)
                wants_prover = False
                prover = proving_child(prove_in_turn)
            if prover is None:
                return accept(m)
            closed = _check_closed(index, alg, m, stats.cse_shared, recompute_shared)
            prover.submit(closed)  # taken as proved until the child says otherwise
            return closed

        rejected: list[tuple[int, Rejection]] = []
        for i in sorted((i for op in by_op for i in index.by_op.get(op, ())), reverse=True):
            node = nodes[i]
            if i in alg.taken or i in dead or node.domain not in ("", "ai.onnx"):
                continue
            for pattern in by_op[node.op_type]:
                pre = pattern.prefilter.get(node.op_type)
                if pre is not None and node.output[0] not in alg.reached(pre):
                    continue
                alg.seen = {i}
                try:
                    found = pattern.match(alg, i)
                    if found is not None:
                        found = accept_form(found)
                except NoMatch as exc:
                    if i not in explained.get(pattern.name, ()):
                        rejected.append((i, Rejection(pattern.name, node_label(node), node.op_type, str(exc))))
                    explained.setdefault(pattern.name, set()).update(alg.seen)
                    continue
                if found is not None:
                    matches.append(found)
                    alg.taken |= found.interior
                    break
        submitted = len(matches)
        if by_meaning:
            explained_at = {i for i, _ in rejected}
            recognised, refusals = meaning.recognise(alg, dead, accept, explained_at,
                                                     proving_child if beside else None)
            matches.extend(recognised)
            # a region a pattern already gave its reason for keeps that reason alone
            rejected.extend((r.anchor, Rejection(f"{r.family}/meaning", node_label(nodes[r.anchor]),
                                                 nodes[r.anchor].op_type, r.reason))
                            for r in refusals if not r.covers & explained_at)
        if prover is not None:
            settled = _settle(alg, matches[:submitted], prover.results(), prove_in_turn, taken_before)
            if settled is None:
                # a form match the proof refuses: the pass as a proof in line would have run it,
                # from that match on (the verdicts are cached now)
                return _fuse_proto(model, patterns, validated, recompute_shared, by_meaning, naming, assume_finite)
            matches[:submitted] = settled
    finally:
        if prover is not None:
            prover.stop()
    # a refusal by one pattern at a node another pattern then fused is no near miss
    report.rejections = [r for i, r in rejected if i not in alg.taken]
    if not matches:
        report.nodes_after = len(model.graph.node)
        out = onnx.ModelProto()
        out.CopyFrom(model)
        return out, report
    work = _shell(model)
    rewritten = _rewrite(model, index, matches, report, work.functions, naming)
    _assemble(work, index, rewritten)
    report.nodes_after = len(work.graph.node)
    return work, report


def _check_closed(index: GraphIndex, alg: Algebra, m: Match, cse_shared: set[str], recompute_shared: bool) -> Match:
    """The match, closed: it must own every intermediate it removes and must not overlap an earlier
    match (NoMatch otherwise). Reads `m` and returns a new Match with what closing it adds.

    An intermediate that only became shared because normalization merged identical copies is
    not a real outside use: the copy is re-emitted for the outside users (duplicate). With
    `recompute_shared`, every shared intermediate is re-emitted so (the user accepts computing it
    twice), with the matched nodes it is computed from. An intermediate only Shape/Size read
    outside is read from an input of the same shape instead (shape_reads).
    """
    overlap = (m.interior | m.boundary) & alg.taken
    if overlap:
        raise NoMatch(f"overlaps an earlier fusion at {node_label(index.nodes[min(overlap)])}")
    root = index.producer.get(m.output)
    if root is None or root not in m.interior:
        raise NoMatch("internal: the fused output is not produced inside the match")
    shape_reads = dict(m.shape_reads)
    duplicate = set(m.duplicate)
    pending = []
    for i in m.interior:
        for name in index.nodes[i].output:
            if name == m.output or not name:
                continue
            if name in index.graph_outputs:
                raise NoMatch(f"intermediate {name} is a graph output")
            if index.is_escaping(name, m.interior):
                user = next(c for c in index.consumers[name] if c not in m.interior)
                substitute = _same_shape_input(index, m, name)
                if substitute is not None:
                    shape_reads[name] = substitute
                    continue
                pending.append((i, name, user))
    recomputed = 0  # matched nodes kept for outside readers that the graph itself shared
    while pending:
        i, name, user = pending.pop()
        if i in duplicate:
            continue
        if name not in cse_shared:
            if not recompute_shared:
                raise NoMatch(f"intermediate {name} is also used by {node_label(index.nodes[user])} outside the "
                              "match (lower fuses it by default and computes the value again for them; "
                              "--no-recompute-shared refuses it)")
            meet = _meeting_point(index, m.output, user)
            if meet is not None:
                raise NoMatch(f"it is a part of a larger elementwise function: its output and "
                              f"{node_label(index.nodes[user])}, which reads its intermediate {name}, meet again at "
                              f"{node_label(index.nodes[meet])}")
            recomputed += 1
        duplicate.add(i)
        for source in index.nodes[i].input:
            j = index.producer.get(source)
            if j is not None and j in m.interior and j not in duplicate:
                pending.append((j, source, user))
    caveats = list(m.caveats)
    if recomputed:
        caveats.append(f"{recomputed} matched node(s) also stay in the graph for the readers outside the fusion "
                       "of what they compute: the graph computes those values twice")
    for value in m.inputs:
        if isinstance(value, str) and index.producer.get(value) in m.interior:
            raise NoMatch(f"internal: input {value} is computed inside the match")
    closed = replace(m, shape_reads=shape_reads, duplicate=duplicate, caveats=caveats)
    if closed.expand and len(_broadcast_positions(index, closed, root)) < 2 * len(closed.expand):
        raise NoMatch("too few matched nodes after its inputs leave the graph to put the Expand of a broadcast "
                      "input in their place")
    return closed


def _proved(alg: Algebra, m: Match, assume_finite: bool) -> Match:
    """The match with what its proof adds (a non-finite variant, caveats), or NoMatch with the
    proof's counterexample."""
    verdict = prove_match(alg, m, assume_finite)
    if not verdict.holds:
        raise NoMatch(verdict.reason)
    return _with_verdict(m, verdict)


def _settle(alg: Algebra, submitted: list[Match], verdicts: list[Verdict] | None,
            prove_in_turn: Callable[[Match], Verdict], taken_before: set[int]) -> list[Match] | None:
    """The matches a child proved, with what their proofs add; None when one is refused. Without
    the child's verdicts (it failed), proved here as the child proves them (`prove_in_turn`, each
    with the earlier matches' nodes taken on top of `taken_before`)."""
    if verdicts is None or len(verdicts) != len(submitted):
        taken_after = alg.taken
        alg.taken = set(taken_before)
        try:
            verdicts = [prove_in_turn(m) for m in submitted]
        finally:
            alg.taken = taken_after
    if not all(v.holds for v in verdicts):
        return None
    return [_with_verdict(m, v) for m, v in zip(submitted, verdicts)]


def _with_verdict(m: Match, verdict: Verdict) -> Match:
    caveats = m.caveats + [c for c in verdict.caveats if c not in m.caveats]
    return replace(m, attrs={**m.attrs, **verdict.attrs}, caveats=caveats, waived=verdict.waived)


def _meeting_point(index: GraphIndex, output: str, user: int, depth: int = 8) -> int | None:
    """A node that reads, through at most `depth` elementwise nodes each, both `output` and the
    output of node `user`: then the match is one piece of a function the graph finishes
    elementwise (a near miss's two halves), not a value the rest of the graph reads on its own
    (a forward loss beside its gradient, which ends in a reduction or a graph output)."""
    root = index.producer[output]
    ahead = _elementwise_cone(index, root, depth) - {root}
    return next((i for i in sorted(_elementwise_cone(index, user, depth)) if i in ahead), None)


def _elementwise_cone(index: GraphIndex, start: int, depth: int) -> set[int]:
    """`start` and the elementwise nodes that read it through at most `depth` nodes."""
    seen = {start}
    frontier = [start]
    for _ in range(depth):
        frontier = [c for i in frontier for name in index.nodes[i].output for c in index.consumers.get(name, ())
                    if c not in seen and index.nodes[c].op_type in ELEMENTWISE]
        seen.update(frontier)
    return seen


def _same_shape_input(index: GraphIndex, m: Match, name: str) -> str | None:
    """An input of the match defined before name, of name's shape, when every outside user of
    name is a Shape or Size node (they read only its shape: d.numel() or d.shape[0] of a matched
    intermediate)."""
    users = [index.nodes[c] for c in index.consumers[name] if c not in m.interior]
    if not all(u.op_type in ("Shape", "Size") and u.domain in ("", "ai.onnx") for u in users):
        return None
    at = index.producer[name]
    for value in m.inputs:
        if (isinstance(value, str) and index.producer.get(value, -1) < at and value not in index.graph_outputs
                and same_shape(index, value, name)):
            return value
    return None


class _Names:
    """Fresh names that collide with nothing in the model. Value names are checked against the
    index's own tables; only node names need a set of their own."""

    def __init__(self, index: GraphIndex, naming: Naming | None) -> None:
        self._index = index
        self.used = set(map(attrgetter("name"), index.nodes))
        # the names of the model's other graphs (and those made there) when this is one of several
        self._reserved = naming.reserved if naming is not None else set()

    def _taken(self, name: str) -> bool:
        index, info = self._index, self._index.info
        return (name in self.used or name in self._reserved or name in index.producer or name in info.initializers
                or name in info.graph_inputs
                or name in info.graph_outputs or name in info.types.declared or name in index.folded)

    def fresh(self, base: str) -> str:
        name, k = base, 0
        while self._taken(name):
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        self._reserved.add(name)
        return name


@dataclass
class _Rewritten:
    nodes: list[Node]
    initializers: list[onnx.TensorProto]  # new ones, for constant inputs of fused nodes
    fused: list[Node]
    positions: list[int]  # of each node: the index position of the node it keeps or replaces
    replacement: dict[int, Node]  # position -> fused node or re-emitted copy
    gone: set[int]  # positions whose node is not in the output (unless replaced): matched, dead before or after
    renamed_at: dict[str, int]  # fresh names of re-emitted copies and broadcasts -> their position
    new_reads: set[str]  # values the replacements read
    value_info: list[onnx.ValueInfoProto]  # types of the broadcast inputs of fused nodes


def _tensor(value: np.ndarray, name: str) -> onnx.TensorProto:
    if value.dtype == np.float32 and value.ndim == 0:  # the usual new input: a folded scalar
        return onnx.TensorProto(name=name, data_type=onnx.TensorProto.FLOAT, float_data=[float(value)])
    return numpy_helper.from_array(value, name)


def _attribute(name: str, value: object) -> onnx.AttributeProto:
    """helper.make_attribute for the contract's attribute kinds, without its type probing."""
    if isinstance(value, float):
        return onnx.AttributeProto(name=name, type=onnx.AttributeProto.FLOAT, f=value)
    if isinstance(value, str):
        return onnx.AttributeProto(name=name, type=onnx.AttributeProto.STRING, s=value.encode())
    return helper.make_attribute(name, value)


def _rewrite(model: onnx.ModelProto, index: GraphIndex, matches: list[Match], report: FusionReport,
             functions, naming: Naming | None) -> _Rewritten:
    """Replaces each match. The order stays topological by construction: a fused node takes its
    root's position and reads only values produced before its first matched node, and
    re-emitted intermediates keep their own positions (lowering.verify checks it on the way out)."""
    names = _Names(index, naming)
    removed: set[int] = set()
    renamed: dict[str, str] = {}  # outside uses of re-emitted intermediates
    bodies = FunctionBodies(index, default_opset(model), functions, None if naming is None else naming.overloads)
    first = 0 if naming is None else naming.fused
    if naming is not None:
        naming.fused += len(matches)
    out = _Rewritten([], [], [], [], {}, set(), {}, set(), [])
    replacement = out.replacement
    for count, m in enumerate(sorted(matches, key=lambda m: index.producer[m.output])):
        spec = OP_SPECS[m.op_type]
        node_name = names.fresh(f"{m.op_type}_{first + count}")
        input_names: list[str] = []
        for formal, value in zip(spec.inputs, m.inputs):
            if isinstance(value, str):
                input_names.append(value)
            else:
                tensor = _tensor(np.asarray(value), names.fresh(f"{node_name}_{formal}"))
                out.initializers.append(tensor)
                input_names.append(tensor.name)
        root = index.producer[m.output]
        # the body reads the inputs as the matched nodes did; the fused node reads them broadcast
        body_inputs = list(input_names)
        if m.expand:
            input_names = _broadcast_inputs(index, m, root, node_name, input_names, names, out)
        fused = onnx.NodeProto(op_type=m.op_type, domain=DOMAIN, name=node_name, input=input_names, output=[m.output],
                               attribute=[_attribute(k, v) for k, v in sorted(m.attrs.items())])
        fused.overload = bodies.overload(m.op_type, sorted(m.interior | m.boundary), body_inputs, m.output)
        replacement[root] = Node(fused, node_name, m.op_type, DOMAIN, tuple(input_names), (m.output,))
        out.fused.append(replacement[root])
        removed |= m.interior
        renamed.update(m.shape_reads)
        for i in sorted(m.duplicate):
            copy = onnx.NodeProto()
            copy.CopyFrom(index.nodes[i].to_proto())
            copy.name = names.fresh(f"{node_label(copy)}_unfused")
            for k, name in enumerate(copy.output):
                renamed[name] = copy.output[k] = names.fresh(f"{name}_unfused")
                out.renamed_at[copy.output[k]] = i
            replacement[i] = Node(copy, copy.name, copy.op_type, copy.domain, tuple(copy.input), tuple(copy.output))
        report.fusions.append(Fusion(
            pattern=m.pattern, node=node_name, op_type=m.op_type, domain=DOMAIN, output=m.output,
            inputs=input_names, attributes=dict(m.attrs), dtype=DTYPE_NAMES.get(m.dtype, str(m.dtype)),
            replaced_nodes=[node_label(index.nodes[i]) for i in sorted(m.interior)], caveats=list(m.caveats),
            assumed_finite=m.waived))
    # the matched nodes read nothing any more; their replacements (fused nodes, re-emitted copies) do
    out.new_reads = {name for n in replacement.values() for name in n.input}
    out.gone = removed | cleanup.dead_after_removal(index, removed, out.new_reads) | index.dead
    verify.check_replacements(replacement, index.producer, out.renamed_at)
    gone, nodes = out.gone, index.nodes
    out.positions = [i for i in range(len(nodes)) if i not in gone or i in replacement]
    out.nodes = [replacement[i] if i in replacement else nodes[i] for i in out.positions]
    if renamed:
        # every reader, a later fused node too: its input may be an intermediate an earlier
        # fusion took and re-emitted under a new name
        for node in out.nodes:
            if any(n in renamed for n in node.input):
                node.rewrite(inputs=tuple(renamed.get(n, n) for n in node.input))
    return out


def _broadcast_positions(index: GraphIndex, m: Match, root: int) -> list[int]:
    """Positions of matched nodes that leave the graph after the inputs m.expand reads and
    before the root: where the Shape and Expand of the broadcast inputs go."""
    read = {v for k, like in m.expand.items() for v in (m.inputs[k], m.inputs[like]) if isinstance(v, str)}
    after = max((index.producer.get(v, -1) for v in read), default=-1)
    return sorted(i for i in m.interior if after < i < root and i not in m.duplicate)


def _broadcast_inputs(index: GraphIndex, m: Match, root: int, node_name: str, input_names: list[str],
                      names: _Names, out: _Rewritten) -> list[str]:
    """Expand(input, Shape(like)) for each input m.expand broadcasts, each node in the place of a
    matched node (_broadcast_positions; _check_closed made sure there are enough), so the order
    stays topological."""
    free = iter(_broadcast_positions(index, m, root))
    spec = OP_SPECS[m.op_type]
    inputs = list(input_names)
    for k, like in sorted(m.expand.items()):
        shape_at, expand_at = next(free), next(free)
        formal = spec.inputs[k]
        shape = names.fresh(f"{node_name}_{formal}_shape")
        expanded = names.fresh(f"{node_name}_{formal}_broadcast")
        nodes = (onnx.NodeProto(op_type="Shape", name=names.fresh(f"{node_name}_{formal}_shape"),
                                input=[input_names[like]], output=[shape]),
                 onnx.NodeProto(op_type="Expand", name=names.fresh(f"{node_name}_{formal}_broadcast"),
                                input=[input_names[k], shape], output=[expanded]))
        for at, proto in zip((shape_at, expand_at), nodes):
            out.replacement[at] = Node(proto, proto.name, proto.op_type, "", tuple(proto.input), tuple(proto.output))
            out.renamed_at[proto.output[0]] = at
        dims = _broadcast_dims(index, input_names[like], input_names[k] if m.expand.get(like) == k else None)
        elem_type = index.elem_type(input_names[k])
        if elem_type is None:
            raise InternalError(f"the broadcast input {input_names[k]} has no known element type")
        out.value_info.append(helper.make_tensor_value_info(expanded, elem_type, dims))
        inputs[k] = expanded
    return inputs


def _broadcast_dims(index: GraphIndex, like: str, other: str | None) -> list | None:
    """The dims of a value expanded to `like`'s shape. When `other` is expanded to it in turn (two
    inputs whose dims an exporter named apart), both get the shape of their broadcast: a dim they
    name differently gets one new name for the two, so the kernel sees one shape."""
    vt = index.type_of(like)
    dims = None if vt is None or vt.shape is None else list(vt.shape)
    ot = None if other is None else index.type_of(other)
    if dims is None or ot is None or ot.shape is None or len(ot.shape) != len(dims):
        return dims
    return [a if a == b else "_or_".join(sorted((a, b))) if isinstance(a, str) and isinstance(b, str) else None
            for a, b in zip(dims, ot.shape)]


def _type_fused_values(graph: onnx.GraphProto, info: GraphInfo, fused: list[Node], typed: set[str]) -> None:
    """Writes value_info for every value a fused node reads or writes that has none (is not in
    `typed`) or only an incomplete one the pass completed, so the fused model can be lowered on
    its own (the pass may have inferred types the exporter did not write, or wrote as [?,?])."""
    typed = typed | info.graph_inputs | info.graph_outputs
    for node in fused:
        for name in node.input + node.output:
            if (name in typed or name in info.initializers
                    or (name in info.types.declared and name not in info.types.inferred)):
                continue
            vi = info.types.value_info(name)
            if vi is not None and vi.type.tensor_type.elem_type:
                graph.value_info.append(vi)
                typed.add(name)


def _copy_except(source, target, skip: tuple[str, ...]) -> None:
    """Copies every field of one protobuf message into another, except the `skip` fields."""
    for field, value in source.ListFields():
        if field.name in skip:
            continue
        # protobuf 6 says `is_repeated`, older releases only `label`
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        if repeated:
            getattr(target, field.name).extend(value)
        elif field.type == field.TYPE_MESSAGE:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


def _shell(model: onnx.ModelProto) -> onnx.ModelProto:
    """The input's metadata and graph signature, without nodes, value_info and initializers."""
    work = onnx.ModelProto()
    _copy_except(model, work, ("graph",))
    _copy_except(model.graph, work.graph, ("node", "value_info", "initializer"))
    return work


def _assemble(work: onnx.ModelProto, index: GraphIndex, rewritten: _Rewritten) -> None:
    """Fills the shell with the rewritten nodes, the value_info and initializers they still use
    and the folded constants they read. Every part of the input is copied once, and nothing is
    copied that is then thrown away; what is still read is found from the index's consumer lists."""
    info, folded, gone, replacement = index.info, index.folded, rewritten.gone, rewritten.replacement
    new_reads, graph_outputs, consumers = rewritten.new_reads, info.graph_outputs, index.consumers
    new_inits = {t.name for t in rewritten.initializers}

    def available(name: str) -> bool:
        return name in info.graph_inputs or name in info.initializers or name in folded or name in new_inits

    def still_read(name: str) -> bool:
        if name in new_reads or name in graph_outputs:
            return True
        for c in consumers.get(name, ()):
            if c not in gone:
                return True
        return False

    nodes = rewritten.nodes
    verify.check_graph(nodes, rewritten.positions, index.producer, replacement, gone,
                       rewritten.renamed_at, available, info.graph_outputs)
    graph = work.graph
    graph.node.extend([n.to_proto() for n in nodes])
    declared, inferred = info.types.declared, info.types.inferred
    completed = {name for n in rewritten.fused for name in n.input + n.output if name in inferred}
    graph.value_info.extend([declared[name] for n in nodes for name in n.output
                             if name in declared and name not in completed])
    graph.initializer.extend([t for name, t in info.initializers.items()
                              if name in info.graph_inputs or still_read(name)])
    graph.initializer.extend(numpy_helper.from_array(np.asarray(v), name)
                             for name, v in folded.items() if still_read(name))
    graph.initializer.extend(rewritten.initializers)
    graph.value_info.extend(rewritten.value_info)
    typed = new_inits | folded.keys() | {vi.name for vi in rewritten.value_info}
    _type_fused_values(graph, info, rewritten.fused, typed)
    if not any(o.domain == DOMAIN for o in work.opset_import):
        work.opset_import.append(helper.make_opsetid(DOMAIN, DOMAIN_VERSION))
    work.ir_version = max(work.ir_version, FUNCTION_IR_VERSION)
