"""The committed exporter-made fixtures: tests/fixtures/<exporter>/*.onnx, each folder with a
manifest.json (exporters/: PyTorch, written by models/make_models.py; tf2onnx/: TensorFlow through
tf2onnx, written by models/make_tf_models.py; fp16_converted/: PyTorch fixtures converted to
float16 by onnxconverter-common, written by models/make_converted_models.py)."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((REPO / "tests" / "fixtures").glob("*/manifest.json"))


def manifest_entries() -> list[dict]:
    """Every fixture's entry, from every manifest; "file" is relative to the repository."""
    return [entry for path in MANIFESTS for entry in json.loads(path.read_text(encoding="utf-8"))]
