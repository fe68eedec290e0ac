"""Work beside the pass: a forked child that applies one function to the items it is handed.

The pass is single-threaded Python; on a machine with a second core, the `lower` command hands
work whose result it needs only later to a child: the proofs of the syntactic forms' matches
(lowering.proof.beside), half of the recogniser's differences (lowering.patterns.meaning). A fork
copies nothing until either side writes, so the child starts at once with everything the parent
computed (the index, the caches), and only the items and the results are pickled.

Forks are made only where this process is the pass's own (the `lower` command), never inside a
caller's process, whose threads and handles a fork would inherit. A child that fails in any way
(killed, an exception, no process to be had) returns no results, and the caller does the work
itself: a child changes when a result is ready, never what it is.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import threading
import warnings
from collections.abc import Callable
from multiprocessing.connection import Connection, Pipe
from typing import Any, Generic, TypeVar

from .loading import usable_cpus

In = TypeVar("In")
Out = TypeVar("Out")
_BATCH = 256  # items per message: one pickle each, not one per item


class Beside(Generic[In, Out]):
    """A forked child applying `work` to each item `submit` hands it, in order; `results` collects
    them, and hands what `extra` returns in the child at the end to `take_extra` in this process
    (the proofs the child made, for this process's cache)."""

    def __init__(self, work: Callable[[In], Out], extra: Callable[[], Any],
                 take_extra: Callable[[Any], None]) -> None:
        ours, theirs = Pipe()
        with warnings.catch_warnings():
            # a fork beside the ONNX checker's feeder thread: the child runs only _serve, which
            # takes none of the locks that thread may hold
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's coverage is not collected
            ours.close()
            _serve(theirs, work, extra)
        theirs.close()
        self._pid: int | None = pid
        self._conn = ours
        self._take_extra = take_extra
        self._batch: list[In] = []
        self._outbox: queue.SimpleQueue[list[In] | None] = queue.SimpleQueue()
        self._sent_all = True
        # the sends run in a thread: a child busy with a solver call must not hold up the pass
        self._feeder = threading.Thread(target=self._feed, daemon=True)
        self._feeder.start()

    @classmethod
    def start(cls, work: Callable[[In], Out], extra: Callable[[], Any] = lambda: None,
              take_extra: Callable[[Any], None] = lambda _: None) -> Beside[In, Out] | None:
        """A child, on a machine with a second core where this process can fork; else None."""
        if not hasattr(os, "fork") or usable_cpus() < 2:
            return None
        try:
            return cls(work, extra, take_extra)
        except OSError:  # no process to be had
            return None

    def submit(self, item: In) -> None:
        self._batch.append(item)
        if len(self._batch) >= _BATCH:
            self._outbox.put(self._batch)
            self._batch = []

    def flush(self) -> None:
        """Sends what was submitted so far now, not with the next full batch."""
        if self._batch:
            self._outbox.put(self._batch)
            self._batch = []

    def results(self) -> list[Out] | None:
        """Every submitted item's result, in order; None when the child failed (the caller does
        the work itself). Ends the child."""
        self.flush()
        self._outbox.put(None)
        self._feeder.join()
        try:
            if not self._sent_all:
                return None
            results, extra = self._conn.recv()
        except (EOFError, OSError):
            return None
        finally:
            self.stop()
        self._take_extra(extra)
        return results

    def stop(self) -> None:
        """Ends the child (at once, if it still runs) and reaps it."""
        self._outbox.put(None)  # lets the feeder end, if results() did not
        self._conn.close()
        if self._pid is not None:
            pid, self._pid = self._pid, None
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)

    def _feed(self) -> None:
        while (batch := self._outbox.get()) is not None:
            if self._sent_all:
                try:
                    self._conn.send(batch)
                except (OSError, ValueError):  # the child is gone; results() says so
                    self._sent_all = False
        if self._sent_all:
            try:
                self._conn.send(None)
            except (OSError, ValueError):
                self._sent_all = False


class Claims:
    """Positions 0 .. n-1 handed out one at a time to whichever process asks first: this one, or
    a child forked after the Claims was made (they share its counter). Work split this way follows
    how fast each side goes, on a machine whose other core is busy too."""

    def __init__(self, n: int) -> None:
        self._n = n
        self._next = multiprocessing.Value("q", 0)

    def claim(self) -> int | None:
        """The next position nobody has claimed; None once all are (or after close)."""
        with self._next.get_lock():
            k = self._next.value
            if k >= self._n:
                return None
            self._next.value = k + 1
        return k

    def close(self) -> None:
        """No position is handed out any more, to either side."""
        with self._next.get_lock():
            self._next.value = self._n


def _serve(conn: Connection, work: Callable[[Any], Any], extra: Callable[[], Any]) -> None:  # pragma: no cover
    """The child: applies `work` to each item it receives, then sends the results and `extra()`.
    It never returns: it leaves with os._exit, so nothing of the parent's (buffers, atexit
    handlers, the proof store) is flushed or written twice."""
    status = 1
    try:
        _close_inherited(conn.fileno())
        results: list[Any] = []
        while (batch := conn.recv()) is not None:
            results.extend(work(item) for item in batch)
        conn.send((results, extra()))
        status = 0
    except BaseException:  # a bug or Ctrl-C: the parent does the work, and reports a bug itself
        pass
    finally:
        os._exit(status)


def _close_inherited(keep: int) -> None:  # pragma: no cover - runs in the child
    """Closes every descriptor the fork copied but stdio and `keep`: a pipe the child held open
    would keep its reader (the ONNX checker reading the model, another child reading its work)
    waiting for an end of input."""
    limit = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1 << 16
    os.closerange(3, keep)
    os.closerange(keep + 1, max(limit, keep + 1))
