"""The algebraic views read the graph and return new objects: asking any view about any value
changes neither the graph index nor what the caller passed in."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from pass_forms import F, H, const_tensor, graph_model, pgd, sl1

from lowering.algebra import Algebra, Monomial
from lowering.graph import GraphIndex, GraphInfo, decode_nodes
from lowering.normalize import normalize


def _algebra(model: onnx.ModelProto) -> Algebra:
    info = GraphInfo(model)
    normalized = normalize(decode_nodes(model.graph), info)
    return Algebra(GraphIndex(normalized.nodes, info, normalized.folded))


def _snapshot(index: GraphIndex) -> tuple:
    """What the views read: nodes, use-def tables, graph inputs and outputs, constants."""
    return ([(n.op_type, n.domain, tuple(n.input), tuple(n.output), n.changed) for n in index.nodes],
            dict(index.producer), {k: list(v) for k, v in index.consumers.items()},
            {k: list(v) for k, v in index.by_op.items()}, set(index.graph_inputs), set(index.graph_outputs),
            sorted(index.initializers), sorted(index.folded))


def _ask_every_view(alg: Algebra) -> None:
    values = [v for n in alg.index.nodes for v in (*n.input, *n.output) if v]
    for v in values:
        alg.monomial(v)
        alg.terms(v)
        alg.select(v)
        alg.compare(v)
        alg.clamp(v)
        alg.uncast(v)
        alg.widened(v)
        alg.widening_casts(v)
        alg.narrowed(v, T.FLOAT16)
        alg.unary_narrowed(v, "Sign")
        alg.numel_of(v)


@pytest.mark.parametrize("model", [
    sl1("where"), sl1("tf2onnx"), sl1("clip", reduction="sum"), sl1("where", dtype=H, cast_wrapped=True),
    sl1("where", dynamic=True), pgd("max"), pgd("relu", scalars="raw"), pgd(shrink="softshrink"),
    pgd(shrink="nested-where"),
], ids=["sl1-where", "sl1-tf2onnx", "sl1-clip", "sl1-cast-wrapped", "sl1-dynamic-mean", "pgd-max", "pgd-relu-raw",
        "pgd-softshrink", "pgd-nested-where"])
def test_asking_every_view_about_every_value_leaves_the_index_unchanged(model: onnx.ModelProto) -> None:
    alg = _algebra(model)
    before = _snapshot(alg.index)
    _ask_every_view(alg)
    assert _snapshot(alg.index) == before
    assert alg.taken == set()


def _shared_scale_select() -> onnx.ModelProto:
    """Where(|x| < 0.5, g*x/0.5, g*sign(x)) with g = dout * 0.25 read by both branches."""
    nodes = [h.make_node("Sub", ["p", "t"], ["x"]), h.make_node("Abs", ["x"], ["ax"]),
             h.make_node("Less", ["ax", "beta"], ["lt"]), h.make_node("Mul", ["dout", "quarter"], ["g"]),
             h.make_node("Mul", ["g", "x"], ["gx"]), h.make_node("Div", ["gx", "beta"], ["lin"]),
             h.make_node("Sign", ["x"], ["s"]), h.make_node("Mul", ["g", "s"], ["gs"]),
             h.make_node("Where", ["lt", "lin", "gs"], ["grad"])]
    return graph_model(nodes, {"p": (F, (4,)), "t": (F, (4,)), "dout": (F, ())}, {"grad": (F, (4,))},
                       [const_tensor("beta", 0.5), const_tensor("quarter", 0.25)])


def _copy(m: Monomial) -> Monomial:
    return Monomial(m.coef, dict(m.factors), set(m.nodes))


def test_expanded_shared_returns_expanded_copies_and_leaves_its_arguments() -> None:
    alg = _algebra(_shared_scale_select())
    sel = alg.select("grad")
    assert sel is not None and "g" in sel.when_true.factors and "g" in sel.when_false.factors
    given = [_copy(sel.when_true), _copy(sel.when_false)]
    expanded = alg.products.expanded_shared([sel.when_true, sel.when_false], sel.nodes, stop=frozenset({"x"}))
    assert [sel.when_true, sel.when_false] == given  # the arguments are as they were
    assert all("g" not in m.factors and "dout" in m.factors for m in expanded)
    assert [m.coef for m in expanded] == [0.25 / 0.5, 0.25]


def test_the_facades_expand_shared_updates_the_callers_monomials_as_expanded_shared_computes_them() -> None:
    alg = _algebra(_shared_scale_select())
    sel = alg.select("grad")
    assert sel is not None
    expected = alg.products.expanded_shared([sel.when_true, sel.when_false], sel.nodes, stop=frozenset({"x"}))
    alg.expand_shared([sel.when_true, sel.when_false], sel.nodes, stop=frozenset({"x"}))
    assert [sel.when_true, sel.when_false] == expected
