"""`lower diff` / `--verify` options: user errors are exit 2 with one line before any work, -q is
quiet, progress shows on long runs only, and model text reaches the terminal escaped and short."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import numpy as np
import onnx
import pytest

import lowering
import runtime.ort_exec as ort_exec
import runtime.progress as progress_mod
from app.cli import main
from app.diff_cli import InputOptions, check_input_options, check_options, run_diff, run_verify
from contracts.errors import LoweringError
from lowering.terminal import NAME_LIMIT, printable
from runtime.progress import Progress

SEED = 17


@pytest.fixture
def models(build, tmp_path):
    """Saved unfused/fused SmoothL1 models with inputs p, l, d of float32[4,300]."""
    unfused = tmp_path / "u.onnx"
    fused = tmp_path / "f.onnx"
    onnx.save(build.unfused_for_hand_fused(), str(unfused))
    onnx.save(build.fused_smooth_l1_model(), str(fused))
    return unfused, fused


def _npz(path: Path, **arrays: np.ndarray) -> str:
    np.savez(path, **arrays)
    return str(path)


def _good_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)
    return {n: rng.normal(size=(4, 300)).astype(np.float32) for n in "pld"}


@pytest.fixture
def no_onnxruntime(monkeypatch):
    """Fails the test if anything reaches onnxruntime: the checks must come before any work."""
    def refuse(model):
        raise AssertionError("onnxruntime was reached before the options were checked")
    monkeypatch.setattr(ort_exec, "_session", refuse)


def _bad_cases(tmp: Path) -> list[tuple[list[str], str]]:
    arrays = _good_arrays()
    (tmp / "dir.npz").mkdir()
    (tmp / "text.npz").write_text("not a zip\n")
    np.save(tmp / "x.npy", arrays["p"])
    return [
        (["--seed", "-5"], "--seed -5: must be a non-negative integer"),
        (["--inputs", str(tmp / "x.npy")], "not an .npz file"),
        (["--inputs", str(tmp / "missing.npz")], "no such file"),
        (["--inputs", str(tmp / "dir.npz")], "not a file"),
        (["--inputs", str(tmp / "text.npz")], "not an .npz file"),
        (["--inputs", _npz(tmp / "extra.npz", q=arrays["p"], **arrays)], "'q' is not a model input"),
        (["--inputs", _npz(tmp / "short.npz", p=arrays["p"], l=arrays["l"])], "no array for input 'd'"),
        (["--inputs", _npz(tmp / "shape.npz", **{**arrays, "l": arrays["l"][:2]})], "'l' has shape [2, 300]"),
        (["--inputs", _npz(tmp / "dtype.npz", **{**arrays, "d": arrays["d"].astype(np.float64)})],
         "'d' is float64 but the model wants float32"),
        (["--inputs", _npz(tmp / "ok.npz", **arrays), "--seed", "3"], "--seed applies to generated inputs"),
        (["--inputs", str(tmp / "ok.npz"), "--shape", "p=4,300"], "--shape applies to generated inputs"),
        (["--inputs", str(tmp / "ok.npz"), "--edge-nonfinite"], "--edge-nonfinite applies to generated inputs"),
        (["--shape", "p=4;300"], "DIMS must be"),
        (["--shape", "nope=3"], "no such input"),
        (["--json", str(tmp / "no" / "r.json")], "no folder"),
        (["--json", str(tmp / "dir.npz")], "is a directory"),
    ]


def test_every_bad_option_is_exit_2_with_one_line_from_the_cli(models, tmp_path, capsys, no_onnxruntime):
    unfused, fused = models
    for argv, message in _bad_cases(tmp_path):
        assert main(["diff", str(unfused), str(fused), *argv]) == 2, argv
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1, (argv, captured)
        assert message in captured.err, (argv, captured.err)
        assert "internal error" not in captured.err


def test_unreadable_inputs_file_is_exit_2(models, tmp_path, capsys, no_onnxruntime, monkeypatch):
    """A file the user may not read (simulated: the tests may run as root, who reads anything)."""
    import runtime.inputs as inputs

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    unfused, fused = models
    npz = _npz(tmp_path / "locked.npz", **_good_arrays())
    monkeypatch.setattr(inputs.zipfile, "ZipFile", denied)
    assert main(["diff", str(unfused), str(fused), "--inputs", npz]) == 2
    err = capsys.readouterr().err
    assert "cannot read it (Permission denied)" in err and err.count("\n") == 1


@pytest.mark.parametrize("argv,message", [(["--seed", "-1"], "--seed -1"), (["--target", "ascend999"], "ascend999"),
                                          (["--inputs", "x.npy"], "--inputs x.npy")])
def test_options_are_checked_before_the_models_are_read(tmp_path, capsys, argv, message):
    assert main(["diff", str(tmp_path / "none.onnx"), str(tmp_path / "none2.onnx"), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "none.onnx" not in err and err.count("\n") == 1


def test_check_input_options_for_lower_before_lowering(build, diff_args, tmp_path):
    model = build.unfused_for_hand_fused()
    opts = check_input_options(diff_args("--seed", "3", "--shape", "p=4,300"), model)
    assert isinstance(opts, InputOptions) and opts.seed == 3 and opts.shapes["d"] == (4, 300)
    assert opts.backend.name == "cpu" and opts.npz is None
    npz = _npz(tmp_path / "ok.npz", **_good_arrays())
    assert check_input_options(diff_args("--inputs", npz), model).npz == npz
    for argv, message in _bad_cases(tmp_path):
        with pytest.raises(LoweringError, match=None) as caught:
            check_input_options(diff_args(*argv), model)
        assert message in str(caught.value) and "\n" not in str(caught.value)


def test_check_options_needs_no_model(diff_args):
    check_options(diff_args("--seed", "0", "--shape", "x=2,3"))
    with pytest.raises(LoweringError, match="--seed"):
        check_options(argparse.Namespace(seed=-5, inputs=None, shape=[], backend="cpu", json=None))
    with pytest.raises(LoweringError, match="--backend"):
        check_options(argparse.Namespace(seed=None, inputs=None, shape=[], backend="gpu", json=None))


def test_inputs_from_npz_still_run(models, tmp_path, diff_args, capsys):
    unfused, fused = models
    npz = _npz(tmp_path / "ok.npz", **_good_arrays())
    assert run_diff(unfused, fused, diff_args("--inputs", npz)) == 0
    assert f"inputs: {npz}" in capsys.readouterr().out


# ------------------------------------------------------------------------------------ -q


def _quiet(diff_args, *argv: str) -> argparse.Namespace:
    args = diff_args(*argv)
    args.quiet = True
    return args


def test_quiet_prints_nothing_on_success_even_when_slow(build, diff_args, capsys, monkeypatch):
    monkeypatch.setattr(progress_mod, "DELAY", 0.0)
    monkeypatch.setattr(progress_mod, "INTERVAL", 0.0)
    model = build.prox_chain_model(6)
    fused, _ = lowering.fuse(model)
    assert run_verify(model, fused, "ascend950", _quiet(diff_args)) == 0
    assert capsys.readouterr() == ("", "")


def test_quiet_prints_only_the_failures(build, diff_args, capsys):
    model = build.unfused_for_hand_fused()
    fused = build.fused_smooth_l1_model(node_sigma=0.5, node_name="broken")
    assert run_verify(model, fused, "ascend950", _quiet(diff_args)) == 1
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("FAIL: ") and "fused node broken (SmoothL1LossGradV2)" in out
    assert "max abs err" not in out  # no table


# ------------------------------------------------------------------------------ progress


def test_progress_waits_then_is_rate_limited():
    now = [0.0]
    stream = io.StringIO()
    p = Progress("lower diff", stream=stream, delay=2.0, interval=5.0, clock=lambda: now[0])
    p.stage("fused nodes", total=1000)
    for t, done in ((1.9, 100), (2.1, 300), (3.0, 400), (7.0, 900), (7.2, 1000)):
        now[0] = t
        p.advance(done - p._done)
        p.poll()
    now[0] = 8.0
    p.finish()
    assert stream.getvalue().splitlines() == [
        "lower diff: [   2.1 s] fused nodes: 300/1000",
        "lower diff: [   7.2 s] fused nodes: 1000/1000",
        "lower diff: [   8.0 s] done",
    ]


def test_short_run_prints_no_progress_at_all():
    now = [0.0]
    stream = io.StringIO()
    p = Progress("x", stream=stream, delay=2.0, clock=lambda: now[0])
    p.stage("s")
    now[0] = 1.5
    p.poll()
    p.finish()
    assert stream.getvalue() == ""


def test_progress_shows_on_a_long_run_whatever_the_tensor_sizes(build, diff_args, capsys, monkeypatch):
    """Small tensors, many nodes: the run is long (here: made long by DELAY 0), so lines appear."""
    monkeypatch.setattr(progress_mod, "DELAY", 0.0)
    monkeypatch.setattr(progress_mod, "INTERVAL", 0.0)
    monkeypatch.setattr(progress_mod, "_TICK", 0.001)
    model = build.prox_chain_model(12, shape=(8,))
    fused, _ = lowering.fuse(model)
    assert run_verify(model, fused, "ascend950", diff_args()) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert lines and all(line.startswith("lower --verify: [") for line in lines), err
    assert lines[-1].endswith("] done")
    assert "PASS:" in out and "lower --verify" not in out


# -------------------------------------------------------------------------- terminal text


def test_printable_escapes_and_shortens():
    assert printable("a\x1b[31mb\nc\td") == "a\\x1b[31mb\\nc\\td"
    assert printable("\u202eevil") == "\\u202eevil"
    long = "head_" + "x" * 5000 + "_tail"
    shown = printable(long)
    assert len(shown) == NAME_LIMIT and shown.startswith("head_") and shown.endswith("_tail") and "..." in shown
    assert printable(long, 0) == long and printable("plain") == "plain"


def test_long_and_hostile_names_are_safe_in_table_and_failures(build, diff_args, tmp_path, capsys):
    name = "\x1b[2J\x1b[31m" + "n" * 5000 + "\nrm -rf /"
    unfused = tmp_path / "u.onnx"
    fused = tmp_path / "f.onnx"
    onnx.save(build.unfused_for_hand_fused(), str(unfused))
    onnx.save(build.fused_smooth_l1_model(node_sigma=0.5, node_name=name), str(fused))
    assert run_diff(unfused, fused, diff_args()) == 1
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "\r" not in out + err
    assert max(len(line) for line in out.splitlines()) < 400
    assert "\\x1b[2J" in out and "nnn...nnn" in out


def test_names_in_error_lines_are_escaped_and_shortened(build, diff_args, tmp_path, capsys):
    model = build.prox_model()
    fused, _ = lowering.fuse(model)
    node = next(n for n in fused.graph.node if n.domain == "com.huawei.ascend")
    node.name = "\x1b]0;pwned\x07" + "z" * 5000
    node.attribute.append(onnx.helper.make_attribute("bogus", 1))
    assert run_verify(model, fused, "ascend950", diff_args()) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "\x07" not in err and len(err) < 500, err
    assert "bogus" in err


def test_progress_to_a_closed_stream_goes_quiet():
    stream = io.StringIO()
    stream.close()
    p = Progress("x", stream=stream, delay=0.0, interval=0.0)
    p.stage("s")
    p.poll()
    p.finish()
    assert not p.enabled


def test_options_not_given_are_none_so_lower_can_refuse_them_without_verify(diff_args):
    args = diff_args()
    assert (args.inputs, args.seed, args.shape, args.edge_nonfinite, args.json, args.backend) == (
        None, None, [], False, None, None)
    opts = check_input_options(args, onnx.helper.make_model(onnx.helper.make_graph([], "empty", [], [])))
    assert opts.seed == 0 and opts.backend.name == "cpu"


def test_an_unknown_op_of_the_fused_domain_is_bad_input(tmp_path, capsys):
    import onnx
    from onnx import TensorProto, helper

    from app.cli import main

    graph = helper.make_graph([helper.make_node("Foo", ["x"], ["y"], domain="com.huawei.ascend", name="n")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.huawei.ascend", 1)])
    path = tmp_path / "foo.onnx"
    onnx.save(model, path)
    assert main(["diff", str(path), str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no op Foo" in err[0]
