"""The Form records of the pattern families (lowering/patterns/forms.py) agree with what the pass
fuses on the exporter fixtures and with docs/matched-forms.md, which is generated from them."""

from __future__ import annotations

import json
from pathlib import Path

import onnx

import lowering
from lowering.patterns import DEFAULT_PATTERNS
from lowering.patterns.forms import EXPORTERS, Form
from lowering.patterns.forms_doc import COMMAND, DOC, regenerate

REPO = Path(__file__).resolve().parents[2]
FIXTURE_MANIFESTS = sorted((REPO / "tests" / "fixtures").glob("*/manifest.json"))


def _forms_by_report_name() -> dict[str, Form]:
    return {name: form for pattern in DEFAULT_PATTERNS for form in pattern.forms for name in form.report_names()}


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
    """What a fixture fuses into without the recogniser by meaning is one of the records, and the
    record lists the fixture's exporter (and the converter a float16 fixture went through)."""
    forms = _forms_by_report_name()
    unrecorded, unlisted = [], []
    fused = 0
    for manifest in FIXTURE_MANIFESTS:
        for entry in json.loads(manifest.read_text(encoding="utf-8")):
            _, report = lowering.fuse(onnx.load(REPO / entry["file"]), by_meaning=False)
            for fusion in report.fusions:
                fused += 1
                form = forms.get(fusion.pattern)
                if form is None:
                    unrecorded.append(f"{entry['file']}: {fusion.pattern}")
                    continue
                unlisted += [f"{entry['file']}: {fusion.pattern} from {source}"
                             for source in entry["exporter"].split(" + ") if source not in form.seen_from]
    assert fused > 100, f"only {fused} fusions on the fixtures: the manifests were not read"
    assert not unrecorded, "fusions with no Form record:\n" + "\n".join(unrecorded)
    assert not unlisted, "records that do not list an exporter a fixture was made by:\n" + "\n".join(unlisted)
