"""The committed exporter-made fixtures: tests/fixtures/<exporter>/*.onnx, each folder with a
manifest.json (exporters/: PyTorch, written by models/make_models.py; tf2onnx/: TensorFlow through
tf2onnx, written by models/make_tf_models.py; fp16_converted/: PyTorch fixtures converted to
float16 by onnxconverter-common, written by models/make_converted_models.py).

The folders in NEW_EXPORTERS (written by models/make_jax_models.py, make_ort_training_models.py and
make_paddle_models.py) hold the exporters the pass is being taught to read by meaning (issue 18):
their manifests have the same format plus ground truth for near misses, and are checked for
soundness by test_new_exporter_fixtures.py; they join MANIFESTS, and so the fusion tests, once
the pass fuses them.

subgraphs/ (models/make_loop_models.py: instances inside If/Loop/Scan bodies) has a manifest of
its own format, read by subgraph_fixtures.py and tested by test_pass_subgraphs.py."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NEW_EXPORTERS = ("jax", "ort_training", "paddle")
_ALL = [p for p in sorted((REPO / "tests" / "fixtures").glob("*/manifest.json")) if p.parent.name != "subgraphs"]
MANIFESTS = [p for p in _ALL if p.parent.name not in NEW_EXPORTERS]
NEW_EXPORTER_MANIFESTS = [p for p in _ALL if p.parent.name in NEW_EXPORTERS]


def manifest_entries() -> list[dict]:
    """Every fixture's entry, from every manifest in MANIFESTS; "file" is relative to the repository."""
    return [entry for path in MANIFESTS for entry in json.loads(path.read_text(encoding="utf-8"))]
