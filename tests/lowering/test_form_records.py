"""The Form records of the pattern families (lowering/patterns/forms.py) agree with what the pass
fuses on the exporter fixtures and with docs/matched-forms.md, which is generated from them."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import onnx
from pass_forms import SL1, F, G
from pass_numerics import assert_fuses_once, make_feeds

import lowering
from lowering.patterns import DEFAULT_PATTERNS
from lowering.patterns.forms import EXPORTERS, Form
from lowering.patterns.forms_doc import COMMAND, DOC, regenerate

REPO = Path(__file__).resolve().parents[2]
# subgraphs/ has a manifest of its own format (tests/lowering/subgraph_fixtures.py): its bodies hold
# the forms its exporters write at top level, which the other folders record
FIXTURE_MANIFESTS = [p for p in sorted((REPO / "tests" / "fixtures").glob("*/manifest.json"))
                     if p.parent.name != "subgraphs"]


def _forms_by_report_name() -> dict[str, Form]:
    return {name: form for pattern in DEFAULT_PATTERNS for form in pattern.forms for name in form.report_names()}


@functools.cache
def _fixture_fusions() -> tuple[tuple[str, str, str], ...]:
    """(fixture file, exporter label, pattern name) of every fusion on the fixtures, without the
    recogniser by meaning."""
    found = []
    for manifest in FIXTURE_MANIFESTS:
        for entry in json.loads(manifest.read_text(encoding="utf-8")):
            _, report = lowering.fuse(onnx.load(REPO / entry["file"]), by_meaning=False)
            found += [(entry["file"], entry["exporter"], fusion.pattern) for fusion in report.fusions]
    return tuple(found)


def _nested_huber_of_arithmetic_selects() -> onnx.ModelProto:
    """where(x < -b, -g*b, where(x > b, g*b, g*x)) with both selects written as tf2onnx writes
    tf.where, Add(Mul(Cast(c), a), Mul(b, Cast(Not(c))))."""
    g = G()
    predict, label, dout = g.input("predict"), g.input("label"), g.input("dout", shape=())
    x = g.op("Sub", predict, label)
    b, minus_b = g.const(0.5), g.const(-0.5)

    def select(cond: str, when_true: str, when_false: str) -> str:
        mask, other = g.op("Cast", cond, to=F), g.op("Cast", g.op("Not", cond), to=F)
        return g.op("Add", g.op("Mul", mask, when_true), g.op("Mul", when_false, other))

    high = select(g.op("Greater", x, b), g.op("Mul", dout, b), g.op("Mul", x, dout))
    g.output(select(g.op("Less", x, minus_b), g.op("Mul", g.op("Neg", dout), b), high))
    return g.model()


def test_the_committed_document_is_generated_from_the_records() -> None:
    current = DOC.read_text(encoding="utf-8")
    assert regenerate(current) == current, f"docs/matched-forms.md is out of date: run {COMMAND}"


def test_each_record_belongs_to_its_family_and_names_known_sources() -> None:
    names = [name for pattern in DEFAULT_PATTERNS for form in pattern.forms for name in form.report_names()]
    assert len(names) == len(set(names)), "two records give their fusions one name"
    for pattern in DEFAULT_PATTERNS:
        assert pattern.forms, f"{pattern.name} lists no forms"
        for form in pattern.forms:
            assert form.family == pattern.name, form.name
            assert form.spellings and form.seen_from, form.name
            assert set(form.seen_from) <= EXPORTERS.keys(), (form.name, set(form.seen_from) - EXPORTERS.keys())


def test_every_fixture_fusion_is_a_recorded_form_seen_from_its_exporter() -> None:
    """What a fixture fuses into is one of the records, and the record lists the fixture's
    exporter (and the converter a float16 fixture went through)."""
    forms = _forms_by_report_name()
    fusions = _fixture_fusions()
    assert len(fusions) > 100, f"only {len(fusions)} fusions on the fixtures: the manifests were not read"
    unrecorded = [f"{file}: {pattern}" for file, _, pattern in fusions if pattern not in forms]
    assert not unrecorded, "fusions with no Form record:\n" + "\n".join(unrecorded)
    unlisted = [f"{file}: {pattern} from {source}" for file, exporter, pattern in fusions
                for source in exporter.split(" + ") if source not in forms[pattern].seen_from]
    assert not unlisted, "records that do not list an exporter a fixture was made by:\n" + "\n".join(unlisted)


def test_nested_huber_of_arithmetic_selects_fuses_as_a_blend(rng: np.random.Generator) -> None:
    """The one reported name no fixture gives: the nested Huber form under tf2onnx's selects,
    whose NaN where a branch not taken is inf is one of the op's non-finite variants."""
    model = _nested_huber_of_arithmetic_selects()
    node = assert_fuses_once(model, SL1, make_feeds(model, rng, edges=(0.5,)))
    assert {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}["sigma"] == 0.5
    _, report = lowering.fuse(model, by_meaning=False)
    fusion, = report.fusions
    assert fusion.pattern == "smooth_l1_grad/nested-arithmetic-select"
    assert fusion.attributes["nonfinite"] in ("blend", "blend_dout")


def test_every_reported_name_is_given_by_a_fixture_or_a_test_graph() -> None:
    _, report = lowering.fuse(_nested_huber_of_arithmetic_selects(), by_meaning=False)
    given = {pattern for _, _, pattern in _fixture_fusions()} | {fusion.pattern for fusion in report.fusions}
    assert set(_forms_by_report_name()) == given
