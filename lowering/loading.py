"""Load and validate models from a path, an onnx.ModelProto or an onnx_ir.Model; save them back."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
from google.protobuf.message import DecodeError, EncodeError

from contracts.errors import LoweringError

MIN_OPSET = 9  # Where and Sign, the core of both patterns, exist from opset 9 on
MAX_OPSET = onnx.defs.onnx_opset_version()
# from this size on, a child process (0.35 s to start Python and onnx, 45 ms per MB to check)
# finishes well before the pass does (about 0.4 s per MB), so its check costs no time at all
BACKGROUND_CHECK_BYTES = 2 << 20


@dataclass
class LoadedModel:
    model: onnx.ModelProto
    source: Path | None  # where it was read from, None for in-memory models
    has_external_data: bool
    pending: BackgroundCheck | None = None  # the ONNX checker, while it still runs beside the pass
    external_files: tuple[Path, ...] = ()  # the external data files it was read from

    def confirm(self) -> None:
        """Waits for a checker still running in the background; raises LoweringError if it
        rejects the model. Nothing made from the model may leave the caller before this."""
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.verdict()

    def abandon(self) -> None:
        """Stops a background checker whose verdict nobody will ask for (the run was interrupted)."""
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.stop()


# the child gets the model's bytes on stdin, so it checks exactly what the parent parsed
_CHECK_CHILD = """\
import sys
import onnx.checker
try:
    onnx.checker.check_model(sys.stdin.buffer.read())
except (onnx.checker.ValidationError, ValueError) as exc:
    lines = (str(exc).strip() or type(exc).__name__).splitlines()
    sys.stderr.write(lines[0][:300])
    sys.exit(3)
"""
_REJECTED = 3


class BackgroundCheck:
    """The ONNX checker in a child process, so that on a machine with a second core it runs
    beside the pass instead of before it: on a 200k-node model it takes 0.5-0.8 s and leaves
    180 MB in the process that ran it. A child that cannot run (no interpreter, killed) is
    replaced by the checker in this process when the verdict is asked for."""

    def __init__(self, model: onnx.ModelProto, path: Path | None, serialized: bytes) -> None:
        self._model, self._path = model, path
        self._proc = subprocess.Popen([sys.executable, "-c", _CHECK_CHILD], stdin=subprocess.PIPE,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert self._proc.stdin is not None and self._proc.stderr is not None  # both piped just above
        self._stdin, self._stderr = self._proc.stdin, self._proc.stderr
        self._feeder = threading.Thread(target=self._feed, args=(serialized,), daemon=True)
        self._feeder.start()

    def _feed(self, serialized: bytes) -> None:
        try:
            self._stdin.write(serialized)
            self._stdin.close()
        except OSError:  # the child is gone; verdict() checks here instead
            pass

    def verdict(self) -> None:
        self._feeder.join()  # the child reads all of its input before it writes anything
        err = self._stderr.read()
        self._proc.wait()
        if self._proc.returncode == 0:
            return
        if self._proc.returncode == _REJECTED:
            raise _rejected(self._path, err.decode(errors="replace").strip())
        validate(self._model, self._path)

    def stop(self) -> None:
        self._proc.kill()
        self._feeder.join()
        self._stderr.close()
        self._proc.wait()


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _worth_a_child(serialized: bytes) -> bool:
    return len(serialized) >= BACKGROUND_CHECK_BYTES and bool(sys.executable) and usable_cpus() > 1


def _uses_external_data(model: onnx.ModelProto, serialized: bytes) -> bool:
    # every external tensor names its file under the key "location"; the byte search spares the
    # walk over every node's attributes (in Python) for the models that have none
    return b"location" in serialized and any(
        t.data_location == onnx.TensorProto.EXTERNAL
        for t in onnx.external_data_helper._get_all_tensors(model)
    )


def _external_files(model: onnx.ModelProto, folder: Path) -> tuple[Path, ...]:
    locations = {
        entry.value
        for tensor in onnx.external_data_helper._get_all_tensors(model)
        if tensor.data_location == onnx.TensorProto.EXTERNAL
        for entry in tensor.external_data if entry.key == "location"
    }
    return tuple(folder / loc for loc in sorted(locations))


def load(source: Any, background: bool = False) -> LoadedModel:
    """Accepts a path, an onnx.ModelProto or an onnx_ir.Model; raises LoweringError on bad input.

    With `background`, a large model is handed to the ONNX checker in a child process and
    returned before its verdict: the caller must call confirm() before anything made from the
    model leaves it (lowering.api.fuse_loaded does), and must not assume the graph is valid
    until then (LoadedModel.pending is set while it runs).
    """
    if isinstance(source, onnx.ModelProto):
        # one serialization gives the copy, the checker's input and the external-data test
        serialized = serialized_or_none(source)
        if serialized is None:
            model = onnx.ModelProto()
            model.CopyFrom(source)
            _validate_large(model)
            return LoadedModel(model, None, False)
        model = onnx.ModelProto.FromString(serialized)
        external = _uses_external_data(model, serialized)
        return LoadedModel(model, None, external, _checked(model, None, serialized, background and not external))
    if is_ir_model(source):
        import onnx_ir

        model = onnx_ir.serde.serialize_model(source)
        serialized = serialized_or_none(model)
        if serialized is None:
            _validate_large(model)
            return LoadedModel(model, None, False)
        return LoadedModel(model, None, False, _checked(model, None, serialized, background))
    if not isinstance(source, (str, os.PathLike)):
        raise LoweringError(f"expected a model path, onnx.ModelProto or onnx_ir.Model, got {type(source).__name__}")
    path = Path(source)
    if not path.exists():
        raise LoweringError(f"{path}: no such file")
    if path.is_dir():
        raise LoweringError(f"{path}: is a directory, expected an .onnx file")
    try:
        serialized = path.read_bytes()
        model = onnx.ModelProto.FromString(serialized)
    except (DecodeError, RuntimeWarning, ValueError, OSError) as exc:
        raise LoweringError(f"{path}: not a readable ONNX model ({_first_line(exc)})") from None
    if not model.HasField("graph") or model.ir_version == 0:
        raise LoweringError(f"{path}: not an ONNX model (no graph or IR version; truncated or another format?)")
    external = _uses_external_data(model, serialized)
    if external:
        # the checker reads the model from its path: it finds the data files there, and the
        # model with its weights may be too large for protobuf to serialize
        validate(model, path, check_path=path)
        data_files = _external_files(model, path.parent)
        try:
            onnx.external_data_helper.load_external_data_for_model(model, str(path.parent))
        except (OSError, ValueError) as exc:
            raise LoweringError(f"{path}: cannot read its external data ({_first_line(exc)})") from None
        return LoadedModel(model, path, external, external_files=data_files)
    return LoadedModel(model, path, external, _checked(model, path, serialized, background))


def _checked(model: onnx.ModelProto, path: Path | None, serialized: bytes, background: bool) -> BackgroundCheck | None:
    """Runs the checker on the model's bytes, or starts it in the background (returned)."""
    if background and _worth_a_child(serialized):
        check_opset(model, path)
        try:
            return BackgroundCheck(model, path, serialized)
        except OSError:  # no child process here: check in this one
            pass
    validate(model, path, serialized)
    return None


def is_ir_model(obj: Any) -> bool:
    return type(obj).__module__.startswith("onnx_ir") and type(obj).__name__ == "Model"


def default_opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return 0


def validate(model: onnx.ModelProto, path: Path | None = None, serialized: bytes | None = None,
             check_path: Path | None = None) -> None:
    """Raises LoweringError unless the ONNX checker accepts the model; `path` names it in the
    message. `serialized`, the model's own bytes when the caller has them, spares the checker a
    serialization; `check_path` has the checker read that file instead (with its external data)."""
    check_opset(model, path)
    try:
        onnx.checker.check_model(str(check_path) if check_path else model if serialized is None else serialized)
    except (onnx.checker.ValidationError, ValueError) as exc:
        raise _rejected(path, _first_line(exc)) from None


def _rejected(path: Path | None, reason: str) -> LoweringError:
    """The one-line error for a model the ONNX checker rejects, in this process or its child."""
    return LoweringError(f"{path}: the ONNX checker rejects the model: {reason}" if path
                         else f"the ONNX checker rejects the model: {reason}")


def check_opset(model: onnx.ModelProto, path: Path | None = None) -> None:
    """Raises LoweringError unless the model imports a default-domain opset the pass supports."""
    where = f"{path}: " if path else ""
    opset = default_opset(model)
    if opset == 0:
        raise LoweringError(f"{where}the model imports no default-domain opset")
    if opset < MIN_OPSET:
        raise LoweringError(f"{where}opset {opset} is too old; opset {MIN_OPSET} or newer is supported")
    if opset > MAX_OPSET:
        raise LoweringError(f"{where}opset {opset} is newer than this onnx package knows (max {MAX_OPSET})")


def serialized_or_none(model: onnx.ModelProto) -> bytes | None:
    """The model's bytes, or None when it is over protobuf's 2 GB (its weights are in memory)."""
    try:
        return model.SerializeToString()
    except EncodeError:
        return None


def _validate_large(model: onnx.ModelProto) -> None:
    """The checker for an in-memory model over protobuf's 2 GB, which only a path can carry:
    a copy is written with external data to a temporary directory and checked there."""
    with tempfile.TemporaryDirectory(prefix="lowering_check_") as tmp:
        target = save(model, Path(tmp) / "model.onnx", external_data=True)[0]
        validate(model, check_path=target)


def save(model: onnx.ModelProto, path: Path, external_data: bool) -> list[Path]:
    """Writes the model (and its external data file when asked or when the model is over
    protobuf's 2 GB); returns the files written. The model itself is left as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not external_data:
        serialized = serialized_or_none(model)
        if serialized is not None:
            # no tensor refers to external data (load() read it all in), so onnx.save_model's
            # walk over every tensor in Python would find nothing to write
            path.write_bytes(serialized)
            return [path]
    location = path.name + ".data"
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # save_model leaves the tensors it writes out as references to the file
    onnx.save_model(copy, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=1024)
    return [path, path.parent / location]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]
