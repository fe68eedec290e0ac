"""`lower diff --assume-finite` leaves out exactly the positions where an input or the reference
is +-inf or NaN, and says how many; without it every position counts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from app.cli import main
from lowering.rewrite import fuse_proto

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tf2onnx" / "nm_sl1_v1_huber_runtime_weight_f32_op13.onnx"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("assume_finite")
    model = onnx.load(FIXTURE)
    fused, report = fuse_proto(model, assume_finite=True)
    assert [f.assumed_finite for f in report.fusions] == [True]
    fused_path = tmp / "fused.onnx"
    onnx.save(fused, fused_path)
    rng = np.random.default_rng(7)
    feeds = {}
    for k, i in enumerate(model.graph.input):
        a = rng.normal(size=[d.dim_value or 4 for d in i.type.tensor_type.shape.dim]).astype(np.float32)
        a.reshape(-1)[k] = [np.inf, -np.inf, np.nan][k % 3]  # one non-finite value per input, at its own place
        feeds[i.name] = a
    npz = tmp / "inputs.npz"
    np.savez(npz, **feeds)
    return FIXTURE, fused_path, npz


def test_assume_finite_leaves_out_the_nonfinite_positions_and_counts_them(models, capsys) -> None:
    unfused, fused, npz = models
    assert main(["diff", str(unfused), str(fused), "--inputs", str(npz), "--assume-finite"]) == 0
    out = capsys.readouterr().out
    # three inputs, one non-finite element each at positions 0, 1, 2: the output row and the node
    # row leave out those three positions (and any where the reference is non-finite)
    line = next(text for text in out.splitlines() if text.startswith("assume-finite:"))
    assert int(line.split()[1]) >= 6, out


def test_without_it_no_position_is_left_out(models, capsys) -> None:
    unfused, fused, npz = models
    main(["diff", str(unfused), str(fused), "--inputs", str(npz)])
    assert "assume-finite:" not in capsys.readouterr().out
