"""OUTDIR as a transaction: one writer at a time, everything built beside it, moved in when complete.

A `lower` run never leaves OUTDIR half-written and never touches a file it did not write:

- **One writer.** The run holds an exclusive `flock` on `.<OUTDIR name>.lock` beside OUTDIR for its
  whole life. The kernel drops the lock when the process ends, however it ends, so a killed run
  never blocks the next one; a second run while the first is alive fails at once, naming it.
- **Staging.** Every file is written into a new folder beside OUTDIR (same file system, so the
  moves below are renames). A run that fails or is interrupted removes it; one that was killed
  leaves it, and the next run under the lock removes it.
- **Commit.** A new OUTDIR is the staging folder renamed: atomic. An existing OUTDIR has the
  staged files renamed over its files one by one: first its `report.json` is removed, last the new
  one is written, so an interrupted commit leaves nothing that looks complete. Before any rename,
  the manifest lists every file lower may have put there, so a later run can still replace them.
- **Ownership.** The manifest (`.lower-output`, JSON) lists the files a run wrote. A re-run
  replaces and removes only those; any other file in OUTDIR (the user's) is never overwritten or
  deleted, and neither is the input model or its external data wherever they are.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType

from contracts.errors import LoweringError
from lowering.terminal import printable

MANIFEST = ".lower-output"
COMPLETE = "report.json"  # written last: an OUTDIR without it is not a complete output
_STAGING_TAG = ".lower-staging-"
LOCK_INSIDE = ".lower.lock"
_MANIFEST_FORMAT = 1


def _user_error(path: Path, exc: OSError) -> LoweringError:
    return LoweringError(f"{path}: {exc.strerror or exc}")


@dataclass(frozen=True)
class Manifest:
    """What an earlier run left in OUTDIR. `legacy`: a marker from before runs recorded their
    files; such a run's files are replaced by name and none is deleted."""

    files: frozenset[str]
    legacy: bool = False


def read_manifest(outdir: Path) -> Manifest | None:
    """The files an earlier run recorded as its own; None when OUTDIR has no manifest."""
    try:
        text = (outdir / MANIFEST).read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise _user_error(outdir / MANIFEST, exc) from None
    try:
        files = json.loads(text)["files"]
    except (ValueError, KeyError, TypeError):
        return Manifest(frozenset(), legacy=True)
    if not isinstance(files, list):
        return Manifest(frozenset(), legacy=True)
    return Manifest(frozenset(f for f in files if isinstance(f, str) and _is_relative_inside(f)))


def _is_relative_inside(rel: str) -> bool:
    parts = Path(rel).parts
    return bool(parts) and not Path(rel).is_absolute() and ".." not in parts


def _write_manifest(directory: Path, files: Iterable[str]) -> None:
    data = {"written_by": "lower", "format": _MANIFEST_FORMAT, "files": sorted(files)}
    tmp = directory / f"{MANIFEST}.tmp"
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, directory / MANIFEST)


def works_inside(outdir: Path) -> bool:
    """Whether the lock and the staging folder go inside OUTDIR rather than beside it: only for an
    existing OUTDIR whose parent this process may not write (a mount point, `-o .` in a folder
    of someone else's). Every run into one OUTDIR decides the same while the parent keeps its
    permissions, so they take the same lock."""
    return outdir.is_dir() and not os.access(outdir.parent, os.W_OK | os.X_OK)


def _lock_path(outdir: Path) -> Path:
    return outdir / LOCK_INSIDE if works_inside(outdir) else outdir.parent / f".{outdir.name}.lock"


class OutdirLock:
    """An exclusive, non-blocking flock on `.<name>.lock` beside OUTDIR (or `.lower.lock` in it,
    see works_inside), naming its holder."""

    def __init__(self, outdir: Path, command: str) -> None:
        self.path = _lock_path(outdir)
        self.outdir = outdir
        self.command = command
        self._fd: int | None = None

    def acquire(self) -> None:
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise _user_error(self.outdir.parent, exc) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = _read_holder(fd)
                os.close(fd)
                if exc.errno in (errno.EAGAIN, errno.EACCES):
                    raise LoweringError(
                        f"{self.outdir}: another lower run is writing it ({holder}); "
                        "wait for it to end or pick another -o") from None
                raise _user_error(self.path, exc) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:  # else the holder we waited on removed this file: lock the new one
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, since "
                     f"{time.strftime('%H:%M:%S')}: {self.command}\n".encode(errors="replace"))
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.unlink(self.path)  # while still holding it, so no one locks a file that is going away
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 300, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return printable(text.splitlines()[0] if text else "holder unknown", 160)


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the commit's renames are done (they take milliseconds).

    Python runs signal handlers in the main thread whichever thread the kernel hands a signal to,
    so a handler that only records it defers it for the whole process (a thread mask would not:
    numpy's threads leave the signal unblocked). Off the main thread no handler can be set, and
    no signal reaches that code as an exception anyway."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def record(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = {sig: signal.signal(sig, record) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if received:
            signal.raise_signal(received[0])


class OutputTransaction:
    """Stage every output file in `staging`, then `commit()`; leaving the `with` block without
    committing removes the staging folder and leaves OUTDIR as it was.

    `protected` are files that must survive whatever happens (the input model and its data).
    """

    def __init__(self, outdir: Path, *, force: bool, protected: Iterable[Path], command: str = "lower") -> None:
        # the real folder (`-o .`, or a symlink to a folder on another file system): staging goes
        # beside it, on its file system, so that every move is a rename
        outdir = Path(outdir).resolve()
        self.outdir = outdir
        self.force = force
        self.protected = list(protected)
        self.lock = OutdirLock(outdir, command)
        self.workspace = outdir if works_inside(outdir) else outdir.parent
        self.staging = self.workspace / f"{_STAGING_TAG}{outdir.name}.{os.getpid()}"
        self.previous: Manifest | None = None
        self._committed = False
        self._created: list[Path] = []  # folders made for OUTDIR's parent: removed when nothing is committed

    def __enter__(self) -> OutputTransaction:
        if self.outdir.exists() and not self.outdir.is_dir():
            raise LoweringError(f"{self.outdir}: exists and is not a directory")
        for ancestor in self.outdir.parents:
            if ancestor.exists():
                if not ancestor.is_dir():
                    raise LoweringError(f"{ancestor}: Not a directory, so it cannot hold {self.outdir}")
                break
        missing = [a for a in [self.outdir.parent, *self.outdir.parent.parents] if not a.exists()]
        try:
            self.outdir.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _user_error(self.outdir.parent, exc) from None
        self._created = missing
        try:
            self.lock.acquire()
            self._remove_stale_staging()
            self.previous = read_manifest(self.outdir) if self.outdir.is_dir() else None
            self._check_may_write()
            try:
                self.staging.mkdir()
            except OSError as exc:
                raise _user_error(self.workspace, exc) from None
        except BaseException:
            self.lock.release()  # a no-op when it was not taken
            self._remove_created()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if not self._committed:
                shutil.rmtree(self.staging, ignore_errors=True)
        finally:
            self.lock.release()
            if not self._committed:
                self._remove_created()

    def _remove_created(self) -> None:
        for folder in self._created:  # innermost first; one that holds anything stays
            try:
                folder.rmdir()
            except OSError:
                return

    def _remove_stale_staging(self) -> None:
        """Staging folders of runs that were killed: under the lock, no live run owns one."""
        try:
            entries = list(self.workspace.iterdir())
        except OSError:
            return
        for entry in entries:
            if self._is_staging(entry) and entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)

    def _is_staging(self, path: Path) -> bool:
        prefix = f"{_STAGING_TAG}{self.outdir.name}."
        return path.name.startswith(prefix) and path.name[len(prefix):].isdigit()

    def _check_may_write(self) -> None:
        if not self.outdir.is_dir() or self.previous is not None or self.force:
            return
        ours = {LOCK_INSIDE, self.staging.name}
        try:
            empty = not any(p.name not in ours and not self._is_staging(p) for p in self.outdir.iterdir())
        except OSError as exc:
            raise _user_error(self.outdir, exc) from None
        if not empty:
            raise LoweringError(f"{self.outdir}: not empty and not written by lower; "
                                "pick another -o or pass --force (which adds lower's files beside yours)")

    def _is_protected(self, path: Path) -> bool:
        return any(_same_file(path, p) for p in self.protected)

    def commit(self) -> list[Path]:
        """Moves every staged file into OUTDIR; returns their final paths."""
        staged = sorted(str(p.relative_to(self.staging)) for p in self.staging.rglob("*") if not p.is_dir())
        for rel in staged:
            self._check_may_replace(rel)
        with _signals_deferred():
            if not self.outdir.exists():
                _write_manifest(self.staging, staged)
                os.rename(self.staging, self.outdir)
            else:
                self._commit_into_existing(staged)
            self._committed = True
        return [self.outdir / rel for rel in staged]

    def _check_may_replace(self, rel: str) -> None:
        target = self.outdir / rel
        if self._is_protected(target):
            raise LoweringError(f"{target}: would overwrite the input model or its data; pick another -o")
        parent = target.parent
        while parent != self.outdir and self.outdir in parent.parents:
            if parent.exists() and not parent.is_dir():
                raise LoweringError(f"{parent}: exists and is not a directory; move it or pick another -o")
            parent = parent.parent
        if not (target.exists() or target.is_symlink()):
            return
        if target.is_dir() and not target.is_symlink():
            raise LoweringError(f"{target}: is a directory that lower did not write; move it or pick another -o")
        previous = self.previous
        if previous is not None and (previous.legacy or rel in previous.files):
            return
        raise LoweringError(f"{target}: exists and was not written by lower; move it or pick another -o")

    def _commit_into_existing(self, staged: list[str]) -> None:
        previous = self.previous or Manifest(frozenset())
        if COMPLETE in previous.files or previous.legacy:
            (self.outdir / COMPLETE).unlink(missing_ok=True)
        _write_manifest(self.outdir, previous.files | set(staged))
        for rel in [r for r in staged if r != COMPLETE]:
            target = self.outdir / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self.staging / rel, target)
        left: list[str] = []  # earlier files that could not be removed stay listed as lower's
        for rel in sorted(previous.files - set(staged)):
            stale = self.outdir / rel
            if self._is_protected(stale):
                continue
            try:
                stale.unlink()
            except FileNotFoundError:
                pass
            except OSError:  # a folder by now, or not ours to delete: the new output completes anyway
                left.append(rel)
                continue
            _remove_empty_parents(stale.parent, self.outdir)
        _write_manifest(self.outdir, [*staged, *left])
        if COMPLETE in staged:
            os.replace(self.staging / COMPLETE, self.outdir / COMPLETE)
        shutil.rmtree(self.staging, ignore_errors=True)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _remove_empty_parents(directory: Path, stop: Path) -> None:
    while directory != stop and stop in directory.parents:
        try:
            directory.rmdir()
        except OSError:
            return
        directory = directory.parent
