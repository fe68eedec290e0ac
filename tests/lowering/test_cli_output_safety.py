"""`lower`'s outputs are never lost, half-written or mixed, and its errors are one line with exit 2.

Concurrency and interruption are checked on real `lower` processes, started and killed here.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from app.cli import main
from app.outdir import MANIFEST, OutdirLock

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "pass_speed.py"
MODELS = Path(__file__).resolve().parents[2] / "models"
SAMPLE = MODELS / "box_head_train_step.onnx"


def _bench():
    spec = importlib.util.spec_from_file_location("pass_speed_for_cli", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory) -> Path:
    """A model that takes `lower` a second or more: room to interrupt it at several points."""
    model, _ = _bench().build_graph(12000, seed=0)
    path = tmp_path_factory.mktemp("slow") / "slow.onnx"
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def external_model(tmp_path_factory) -> Path:
    model, _ = _bench().build_graph(3000, seed=1)
    weight = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)  # big enough to be stored outside
    model.graph.initializer.append(onnx.numpy_helper.from_array(weight, "W"))
    model.graph.node.append(onnx.helper.make_node("Identity", ["W"], ["w_out"]))
    model.graph.output.append(onnx.helper.make_tensor_value_info("w_out", onnx.TensorProto.FLOAT, [64, 64]))
    folder = tmp_path_factory.mktemp("ext")
    onnx.save_model(model, folder / "ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.onnx.data", size_threshold=0)
    return folder / "ext.onnx"


def _lower_cmd(*args: str | Path) -> list[str]:
    return [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())",
            *map(str, args)]


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_lower_cmd(*args), capture_output=True, text=True, timeout=300)


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _assert_complete(outdir: Path) -> None:
    """A complete output: the manifest lists exactly the files there, the report names the fused
    model and every kernel folder it lists exists."""
    listed = set(json.loads((outdir / MANIFEST).read_text())["files"])
    present = {str(p.relative_to(outdir)) for p in outdir.rglob("*") if p.is_file()} - {MANIFEST}
    assert listed == present
    report = json.loads((outdir / "report.json").read_text())
    assert (outdir / report["fused_model"]).is_file()
    for kernel in report["kernels"]:
        assert (outdir / "kernels" / kernel["kernel"]).is_dir()
    onnx.checker.check_model(str(outdir / report["fused_model"]))


def _no_leftovers(parent: Path) -> None:
    assert [p.name for p in parent.iterdir() if p.name.startswith(".")] == []


def test_second_writer_fails_at_once_naming_the_holder(tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    lock = OutdirLock(outdir, "lower held-by-test")
    lock.acquire()
    try:
        start = time.monotonic()
        proc = _run(SAMPLE, "--target", "ascend950", "-o", outdir)
        elapsed = time.monotonic() - start
    finally:
        lock.release()
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pid {os.getpid()}" in lines[0] and "held-by-test" in lines[0], lines
    assert elapsed < 30 and not outdir.exists()
    _no_leftovers(tmp_path)


def test_concurrent_runs_leave_one_complete_output(tmp_path: Path, external_model: Path) -> None:
    outdir = tmp_path / "out"
    procs = [subprocess.Popen(_lower_cmd(external_model, "--target", "ascend950", "-o", outdir, "-q"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes[0] == 0 and set(codes) <= {0, 2}, results
    for code, err in results:
        if code == 2:
            assert "another lower run is writing it" in err and len(err.strip().splitlines()) == 1
    _assert_complete(outdir)
    original = onnx.load(str(external_model))
    fused = onnx.load(str(outdir / "ext.fused.onnx"))
    before = {t.name: onnx.numpy_helper.to_array(t).tobytes() for t in original.graph.initializer}
    after = {t.name: onnx.numpy_helper.to_array(t).tobytes() for t in fused.graph.initializer}
    assert {k: v for k, v in after.items() if k in before} == {k: before[k] for k in after if k in before}
    _no_leftovers(tmp_path)


def test_rerun_replaces_external_data_instead_of_appending(tmp_path: Path, external_model: Path) -> None:
    outdir = tmp_path / "out"
    sizes = []
    for _ in range(3):
        assert main([str(external_model), "--target", "ascend950", "-o", str(outdir), "-q"]) == 0
        sizes.append((outdir / "ext.fused.onnx.data").stat().st_size)
    assert sizes[0] == sizes[1] == sizes[2]
    _assert_complete(outdir)


@pytest.mark.parametrize("delay", [0.2, 0.6, 1.2, 2.0])
def test_killed_rerun_leaves_the_previous_output_or_nothing_complete(tmp_path: Path, slow_model: Path,
                                                                     delay: float) -> None:
    outdir = tmp_path / "out"
    assert _run(slow_model, "--target", "ascend950", "-o", outdir, "-q").returncode == 0
    before = _snapshot(outdir)
    proc = subprocess.Popen(_lower_cmd(slow_model, "--target", "ascend950", "-o", outdir, "-q"))
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    if (outdir / "report.json").exists():
        assert _snapshot(outdir) == before  # the same input lowers to the same bytes
        _assert_complete(outdir)
    rerun = _run(slow_model, "--target", "ascend950", "-o", outdir, "-q")
    assert rerun.returncode == 0, rerun.stderr
    assert _snapshot(outdir) == before
    _no_leftovers(tmp_path)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_removes_partial_work(tmp_path: Path, slow_model: Path, sig: int, code: int) -> None:
    outdir = tmp_path / "out"
    assert _run(slow_model, "--target", "ascend950", "-o", outdir, "-q").returncode == 0
    before = _snapshot(outdir)
    proc = subprocess.Popen(_lower_cmd(slow_model, "--target", "ascend950", "-o", outdir, "-q"),
                            stderr=subprocess.PIPE, text=True)
    lock = tmp_path / ".out.lock"
    deadline = time.monotonic() + 120
    while not lock.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # the run holds OUTDIR: it is past start-up and at work
    time.sleep(0.3)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:  # the run had finished before the signal came
        pytest.skip("the run ended before the signal; nothing to interrupt")
    assert proc.returncode == code, err
    assert _snapshot(outdir) == before
    _no_leftovers(tmp_path)


def test_force_keeps_files_lower_did_not_write(tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    mine = outdir / "kernels" / "mine" / "k.cpp"
    mine.parent.mkdir(parents=True)
    mine.write_text("// the user's kernel\n")
    model_copy = outdir / "kernels" / "box.onnx"
    model_copy.write_bytes(SAMPLE.read_bytes())
    assert main([str(model_copy), "--target", "ascend950", "-o", str(outdir), "-q"]) == 2  # not ours
    assert main([str(model_copy), "--target", "ascend950", "-o", str(outdir), "-q", "--force"]) == 0
    assert main([str(model_copy), "--target", "ascend950", "-o", str(outdir), "-q", "--force"]) == 0
    assert mine.read_text() == "// the user's kernel\n"
    assert model_copy.read_bytes() == SAMPLE.read_bytes()
    listed = json.loads((outdir / MANIFEST).read_text())["files"]
    assert "kernels/mine/k.cpp" not in listed and "kernels/box.onnx" not in listed


def test_force_never_overwrites_a_file_of_the_user(tmp_path: Path, capsys) -> None:
    outdir = tmp_path / "out"
    outdir.mkdir()
    (outdir / "report.json").write_text("mine")
    assert main([str(SAMPLE), "--target", "ascend950", "-o", str(outdir), "--force"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not written by lower" in err[0]
    assert (outdir / "report.json").read_text() == "mine"
    assert sorted(p.name for p in outdir.iterdir()) == ["report.json"]


def test_rerun_removes_its_own_stale_files_only(tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    assert main([str(SAMPLE), "--target", "ascend950", "-o", str(outdir), "-q"]) == 0
    kernels_before = sorted(p.name for p in (outdir / "kernels").iterdir())
    (outdir / "notes.txt").write_text("mine")
    assert main([str(SAMPLE), "--target", "ascend950", "-o", str(outdir), "-q", "--emit", "onnx"]) == 0
    assert kernels_before and not (outdir / "kernels").exists()
    assert (outdir / "notes.txt").read_text() == "mine"
    _assert_complete_without(outdir, {"notes.txt"})


def _assert_complete_without(outdir: Path, user_files: set[str]) -> None:
    listed = set(json.loads((outdir / MANIFEST).read_text())["files"])
    present = {str(p.relative_to(outdir)) for p in outdir.rglob("*") if p.is_file()} - {MANIFEST}
    assert listed == present - user_files


def test_output_files_share_one_mode(tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    assert main([str(SAMPLE), "--target", "ascend950", "-o", str(outdir), "-q"]) == 0
    modes = {stat.S_IMODE(p.stat().st_mode) for p in outdir.rglob("*") if p.is_file() and p.suffix != ".sh"}
    assert len(modes) == 1, modes


@pytest.mark.parametrize("make_args, needle", [
    (lambda t: ["-o", str(t / "file" / "out")], "Not a directory"),
    (lambda t: ["-o", "/sys/lowered-out"], ""),
    (lambda t: ["--seed", "3"], "--seed only applies with --verify"),
    (lambda t: ["--inputs", str(t / "x.npz"), "--backend", "cpu"], "only apply with --verify"),
    (lambda t: ["--emit", "ir", "--verify"], "--emit ir"),
    (lambda t: ["--verify", "--seed", "-5"], "--seed"),
    (lambda t: ["--verify", "--inputs", str(t / "file")], "--inputs"),
    (lambda t: ["--verify", "--shape", "nosuch=3"], "nosuch"),
], ids=["under-a-file", "unwritable", "seed-without-verify", "inputs-without-verify", "ir-with-verify",
        "verify-negative-seed", "verify-inputs-not-npz", "verify-shape-of-no-input"])
def test_user_mistakes_exit_2_with_one_line_and_write_nothing(tmp_path: Path, make_args, needle: str) -> None:
    (tmp_path / "file").write_text("a regular file")
    proc = _run(SAMPLE, "--target", "ascend950", *make_args(tmp_path))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lower: error: ") and needle in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_help_lists_exit_codes(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for code in ("0 ", "1 ", "2 ", "3 ", "130"):
        assert f"\n  {code}" in out


NEAR_MISS = (Path(__file__).resolve().parents[1] / "fixtures" / "exporters"
             / "nm_prox_tensor_clamp_residual_f32_dyn.onnx")


@pytest.mark.parametrize("name, shown", [
    ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
    ("two\nlines", "two\\nlines"),
    ("x" * 5000, "x" * 39 + "..."),
], ids=["ansi", "newline", "5000-chars"])
def test_terminal_output_escapes_and_shortens_model_names(tmp_path: Path, capsys, name: str, shown: str) -> None:
    model = onnx.load(str(NEAR_MISS))
    for node in model.graph.node:
        node.name = name + node.name
    path = tmp_path / "hostile.onnx"
    onnx.save(model, path)
    assert main([str(path), "--target", "ascend950", "-o", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    skipped = [line for line in out.splitlines() if line.startswith("  skipped")]
    assert len(skipped) == 1 and shown in skipped[0], out
    assert len(out.splitlines()) == 3 and "\x1b" not in out and len(skipped[0]) < 300


@pytest.mark.parametrize("error, code, kind", [
    (lambda: __import__("codegen.ir", fromlist=["IRError"]).IRError("broken invariant"), 3, "internal error"),
    (lambda: __import__("runtime.backend", fromlist=["BackendError"]).BackendError("no toolkit"), 2, "error"),
], ids=["internal", "user"])
def test_exit_code_follows_the_errors_user_error_flag(tmp_path: Path, capsys, monkeypatch, error, code: int,
                                                      kind: str) -> None:
    import app.cli

    def fail(*_: object) -> None:
        raise error()

    monkeypatch.setattr(app.cli, "build_kernels", fail)
    assert main([str(SAMPLE), "--target", "ascend950", "-o", str(tmp_path / "out")]) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"lower: {kind}: "), err
    assert not (tmp_path / "out").exists()


def test_outdir_given_as_a_symlink_or_as_dot_is_written_in_place(tmp_path: Path, monkeypatch) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert main([str(SAMPLE), "--target", "ascend950", "-o", str(tmp_path / "link"), "-q"]) == 0
    assert main([str(SAMPLE), "--target", "ascend950", "-o", str(tmp_path / "link"), "-q"]) == 0
    assert (tmp_path / "link").is_symlink()
    _assert_complete(real)
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    assert main([str(SAMPLE), "--target", "ascend950", "-o", ".", "-q"]) == 0
    _assert_complete(here)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here", "link", "real"]


def test_a_signal_during_the_commit_waits_until_the_output_is_complete(tmp_path: Path, monkeypatch) -> None:
    import app.outdir

    outdir = tmp_path / "out"
    assert main([str(SAMPLE), "--target", "ascend950", "-o", str(outdir), "-q"]) == 0
    before = _snapshot(outdir)
    real_replace = os.replace
    calls = []

    def replace_after_a_signal(src: object, dst: object) -> None:
        if not calls:
            os.kill(os.getpid(), signal.SIGINT)  # arrives between two renames of the commit
        calls.append(dst)
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(app.outdir.os, "replace", replace_after_a_signal)
    assert main([str(SAMPLE), "--target", "ascend950", "-o", str(outdir), "-q"]) == 130
    assert len(calls) > 5
    _assert_complete(outdir)
    assert _snapshot(outdir) == before
    _no_leftovers(tmp_path)


def test_lock_and_staging_go_inside_an_outdir_whose_parent_is_not_writable(tmp_path: Path, monkeypatch) -> None:
    import app.outdir

    outdir = tmp_path / "out"
    outdir.mkdir()
    real_access = os.access
    monkeypatch.setattr(app.outdir.os, "access",
                        lambda path, mode: False if Path(path) == tmp_path else real_access(path, mode))
    assert app.outdir.works_inside(outdir.resolve())
    assert main([str(SAMPLE), "--target", "ascend950", "-o", str(outdir), "-q"]) == 0
    assert main([str(SAMPLE), "--target", "ascend950", "-o", str(outdir), "-q"]) == 0
    _assert_complete(outdir)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    lock = OutdirLock(outdir.resolve(), "lower held-by-test")
    lock.acquire()
    try:
        assert lock.path == outdir.resolve() / app.outdir.LOCK_INSIDE
        assert main([str(SAMPLE), "--target", "ascend950", "-o", str(outdir), "-q"]) == 2
    finally:
        lock.release()


def test_a_failed_run_removes_the_folders_it_made_for_outdir(tmp_path: Path) -> None:
    assert main([str(tmp_path / "missing.onnx"), "--target", "ascend950", "-o", str(tmp_path / "a" / "b" / "out")]) == 2
    assert list(tmp_path.iterdir()) == []


def test_an_earlier_file_that_cannot_be_removed_does_not_stop_the_new_output(tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    assert main([str(SAMPLE), "--target", "ascend950", "-o", str(outdir), "-q"]) == 0
    data = json.loads((outdir / MANIFEST).read_text())
    data["files"].append("gone/now_a_folder")
    (outdir / MANIFEST).write_text(json.dumps(data))
    (outdir / "gone" / "now_a_folder").mkdir(parents=True)
    assert main([str(SAMPLE), "--target", "ascend950", "-o", str(outdir), "-q"]) == 0
    assert (outdir / "report.json").exists() and (outdir / "gone" / "now_a_folder").is_dir()
    assert "gone/now_a_folder" in json.loads((outdir / MANIFEST).read_text())["files"]
