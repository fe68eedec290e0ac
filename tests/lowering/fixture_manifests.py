"""The committed exporter-made fixtures: tests/fixtures/<exporter>/*.onnx, each folder with a
manifest.json (exporters/: PyTorch, written by models/make_models.py; tf2onnx/: TensorFlow through
tf2onnx, written by models/make_tf_models.py)."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((REPO / "tests" / "fixtures").glob("*/manifest.json"))


def manifest_entries() -> list[dict]:
    """Every fixture's entry, from every manifest; "file" is relative to the repository."""
    return [entry for path in MANIFESTS for entry in json.loads(path.read_text(encoding="utf-8"))]


# Fixtures that should fuse by their semantics but do not yet; tested as strict xfails, so each
# one that starts to fuse must leave this list. tf.compat.v1.losses.huber_loss differentiates
# 0.5*min(|x|, d)^2 + d*(|x| - min(|x|, d)), whose gradient reaches sign(x) * (c ? |x| : d) only
# through sign(x)*|x| = x, an identity the algebraic views do not apply.
KNOWN_GAPS = {
    "sl1_v1_huber_default_d1_f32_op13": "tf.compat.v1.losses.huber_loss gradient (Min-based form)",
    "sl1_v1_huber_sum_d2_f32_op13": "tf.compat.v1.losses.huber_loss gradient (Min-based form)",
}


def fixture_stem(entry: dict) -> str:
    return Path(entry["file"]).stem
