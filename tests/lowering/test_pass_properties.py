"""Property tests: patterns and near misses embedded in random surrounding graphs.

Whatever surrounds them, every clean instance fuses, every near miss stays, and onnxruntime gives
bit-identical results on the fused model (through the function bodies) and the original.
"""

from __future__ import annotations

import numpy as np
import onnx
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pass_forms import PGD, SL1, G, pgd, sl1, splice
from pass_numerics import assert_same_outputs, fused_nodes, make_feeds

import lowering

UNRELATED = ["Add", "Mul", "Sub", "Relu", "Abs", "Neg", "Max", "Sign", "Tanh"]
SL1_FORMS = ["where", "where_le", "where_ge", "tf2onnx", "clip", "huber", "clip-delta", "sign-min", "mask_ge",
             "mask_one_minus", "sign-clip-max", "select-sum"]
PGD_KINDS = [dict(), dict(clamp="relu"), dict(clamp="clip"), dict(update="add_neg"), dict(shrink="softshrink"),
             dict(scalars="raw"), dict(scalars="folded"), dict(scaling="none"), dict(shrink="residual"),
             dict(shrink="masked", scalars="raw"), dict(shrink="relu-diff"), dict(shrink="relu-plus-min"),
             dict(shrink="where-small", scalars="raw"), dict(shrink="sign-abs-masked"), dict(shrink="where-sign"),
             dict(shrink="min-residual", scalars="raw"), dict(shrink="abs-minus-min"), dict(shrink="nested-where")]

step = st.one_of(
    st.tuples(st.just("op"), st.sampled_from(UNRELATED), st.integers(0, 10**6), st.integers(0, 10**6)),
    st.tuples(st.just("sl1"), st.sampled_from(SL1_FORMS), st.sampled_from(["mean", "sum", "none"]), st.integers(0, 3)),
    st.tuples(st.just("pgd"), st.integers(0, len(PGD_KINDS) - 1), st.integers(0, 10**6), st.integers(0, 10**6)),
    st.tuples(st.just("miss"), st.sampled_from([SL1, PGD]), st.integers(0, 10**6), st.integers(0, 10**6)),
)


def _build(steps) -> tuple[onnx.ModelProto, dict[str, int]]:
    g = G()
    pool = [g.input("in0"), g.input("in1"), g.input("in2")]
    expected = {SL1: 0, PGD: 0}
    for k, (kind, a, b, c) in enumerate(steps):
        prefix = f"s{k}_"
        pick = lambda i: pool[i % len(pool)]  # noqa: E731
        if kind == "op":
            arity = 1 if a in ("Relu", "Abs", "Neg", "Sign", "Tanh") else 2
            pool.append(g.op(a, *[pick(b), pick(c)][:arity]))
            continue
        if kind == "sl1":
            beta = 0.3 + 0.1 * k  # distinct constants: instances never merge through CSE
            dout = "full" if b == "none" else ()
            inst = sl1(form=a, beta=beta, reduction=b, order=c if a.startswith("where") or a == "tf2onnx" else 0,
                       dout_shape=dout)
            names = splice(g, inst, {"predict": pick(k), "label": pick(k + 1)}, prefix)
            expected[SL1] += 1
        elif kind == "pgd":
            inst = pgd(lr=0.1 + 0.01 * k, **PGD_KINDS[a])
            names = splice(g, inst, {"var": pick(b), "delta": pick(c)}, prefix)
            expected[PGD] += 1
        else:
            inst = sl1(beta=0.3 + 0.1 * k) if a == SL1 else pgd(lr=0.1 + 0.01 * k)
            names = splice(g, inst, {inst.graph.input[0].name: pick(b), inst.graph.input[1].name: pick(c)}, prefix)
            inner = next(n for n in inst.graph.node if n.op_type == "Sub").output[0]
            g.output(names[inner])  # an escaping intermediate: must not fuse
        out = names[inst.graph.output[0].name]
        g.output(out)
        pool.append(out)
    for name in pool[3:]:
        if name not in {o.name for o in g.outputs}:
            g.output(name)
    if not g.outputs:
        g.output(g.op("Identity", pool[0]))
    return g.model(), expected


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=12), st.integers(0, 2**32 - 1))
# a near miss whose x is a graph output, then a pattern on the same values: CSE must not merge the
# pattern's x into the near miss's (a graph output is never the copy others merge into)
@example([("miss", "SmoothL1LossGradV2", 1, 260), ("sl1", "where", "mean", 0)], 0)
def test_embedded_patterns_fuse_and_keep_numerics(steps, seed: int) -> None:
    model, expected = _build(steps)
    onnx.checker.check_model(model)
    fused, _ = _fuses_as_expected(model, expected, seed)
    assert [o.name for o in fused.graph.output] == [o.name for o in model.graph.output]


def _fuses_as_expected(model: onnx.ModelProto, expected: dict[str, int], seed: int):
    """Fuses the model; the fused nodes are the expected ones, and onnxruntime gives what the
    original gives on random inputs with inf and NaN."""
    fused, report = lowering.fuse(model)
    onnx.checker.check_model(fused, full_check=True)
    counts = {SL1: 0, PGD: 0}
    for n in fused_nodes(fused):
        counts[n.op_type] += 1
    assert counts == expected, report.summary()
    feeds = make_feeds(model, np.random.default_rng(seed), nonfinite=True)
    assert_same_outputs(model, fused, feeds)
    return fused, report


def _outlined(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same computation with the whole graph moved into a model-local function that the main
    graph calls once (as TorchScript's export_modules_as_functions does with the top module);
    initializers become Constant nodes, which function bodies must use."""
    graph = model.graph
    body = [onnx.helper.make_node("Constant", [], [t.name], value=t) for t in graph.initializer] + list(graph.node)
    function = onnx.helper.make_function("local", "Body", [i.name for i in graph.input], [o.name for o in graph.output],
                                         body, list(model.opset_import))
    call = onnx.helper.make_node("Body", [i.name for i in graph.input], [o.name for o in graph.output], domain="local")
    main = onnx.helper.make_graph([call], "outlined", list(graph.input), list(graph.output))
    opsets = list(model.opset_import) + [onnx.helper.make_opsetid("local", 1)]
    return onnx.helper.make_model(main, opset_imports=opsets, functions=[function], ir_version=model.ir_version)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=8), st.integers(0, 2**32 - 1))
def test_patterns_inside_a_local_function_fuse_and_keep_numerics(steps, seed: int) -> None:
    model, expected = _build(steps)
    outlined = _outlined(model)
    onnx.checker.check_model(outlined, full_check=True)
    _, report = _fuses_as_expected(outlined, expected, seed)
    assert report.inlined_functions == (["local.Body"] if any(expected.values()) else [])
