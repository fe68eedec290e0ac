"""Work beside the pass: a forked child that applies one function to the items it is handed.

The pass is single-threaded Python; on a machine with a second core, the `lower` command hands
work whose result it needs only later to a child: the proofs of the syntactic forms' matches
(lowering.proof.beside), part of the recogniser's differences (lowering.patterns.meaning). A fork
copies nothing until either side writes, so the child starts at once with everything the parent
computed (the index, the caches), and only the items and the results are pickled.

Forks are made only where this process is the pass's own (the `lower` command), never inside a
caller's process, whose threads and handles a fork would inherit. A child that fails in any way
(killed, an exception, no process to be had) returns no results, and the caller does the work
itself: a child changes when a result is ready, never what it is. A Ctrl-C ends a child at once,
without running any of the parent's Python in it.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import threading
import warnings
from collections.abc import Callable
from multiprocessing.connection import Connection, Pipe
from typing import Any, Generic, TypeVar

from .loading import usable_cpus

In = TypeVar("In")
Out = TypeVar("Out")
_BATCH = 256  # items per message: one pickle each, not one per item
_CLAIM_WAIT_S = 1.0  # a claim's lock is held for microseconds: longer means its holder died


def can_fork() -> bool:
    """Whether a child can run beside this process: fork exists and a second core is ours."""
    return hasattr(os, "fork") and usable_cpus() > 1


class Beside(Generic[In, Out]):
    """A forked child applying `work` to each item `submit` hands it, in order; `results` collects
    them, and hands what `extra` returns in the child at the end to `take_extra` in this process
    (the proofs the child made, for this process's cache)."""

    def __init__(self, work: Callable[[In], Out], extra: Callable[[], Any],
                 take_extra: Callable[[Any], None]) -> None:
        ours, theirs = Pipe()
        masked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # no Ctrl-C between fork and handler
        try:
            with warnings.catch_warnings():
                # a fork beside the ONNX checker's feeder thread: the child runs only _serve, which
                # takes none of the locks that thread may hold
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
                if pid == 0:  # pragma: no cover - the child's coverage is not collected
                    _child(ours, theirs, masked, work, extra)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, masked)
        self._pid: int | None = pid
        self._conn = ours
        self._take_extra = take_extra
        self._batch: list[In] = []
        self._outbox: queue.SimpleQueue[list[In] | None] = queue.SimpleQueue()
        self._sent_all = True
        try:
            theirs.close()
            # the sends run in a thread: a child busy with a solver call must not hold up the pass
            self._feeder = threading.Thread(target=self._feed, daemon=True)
            self._feeder.start()
        except BaseException:
            self._end_child()
            raise

    @classmethod
    def start(cls, work: Callable[[In], Out], extra: Callable[[], Any] = lambda: None,
              take_extra: Callable[[Any], None] = lambda _: None) -> Beside[In, Out] | None:
        """A child, on a machine with a second core where this process can fork; else None."""
        if not can_fork():
            return None
        try:
            return cls(work, extra, take_extra)
        except OSError:  # no process to be had
            return None

    def submit(self, item: In, now: bool = False) -> None:
        """Hands the child `item`: with the next full batch, or `now`."""
        self._batch.append(item)
        if now or len(self._batch) >= _BATCH:
            self._send_batch()

    def results(self) -> list[Out] | None:
        """Every submitted item's result, in order; None when the child failed (the caller does
        the work itself). Ends the child."""
        self._send_batch()
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
        """Ends the child (at once, if it still runs), reaps it, and ends the feeder."""
        self._end_child()
        self._outbox.put(None)  # lets the feeder end, if results() did not
        self._feeder.join()  # a send to the dead child fails at once
        self._conn.close()

    def _send_batch(self) -> None:
        if self._batch:
            self._outbox.put(self._batch)
            self._batch = []

    def _end_child(self) -> None:
        if self._pid is not None:
            pid, self._pid = self._pid, None
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)

    def _feed(self) -> None:
        while (batch := self._outbox.get()) is not None:
            if self._sent_all:
                try:
                    self._conn.send(batch)
                except Exception:  # the child is gone, or stop() came first; results() says so
                    self._sent_all = False
        if self._sent_all:
            try:
                self._conn.send(None)
            except Exception:
                self._sent_all = False


class Claims:
    """Positions 0 .. n-1 handed out one at a time to whichever process asks first: this one, or
    a child forked after the Claims was made (they share its counter). Work split this way follows
    how fast each side goes, on a machine whose other core is busy too. Raises OSError or
    ImportError where no shared memory can be had."""

    def __init__(self, n: int) -> None:
        self._n = n
        context = multiprocessing.get_context("fork")
        self._next = context.RawValue("q", 0)
        self._lock = context.Lock()  # not reentrant: a holder is another process or a stuck one

    def claim(self) -> int | None:
        """The next position nobody has claimed; None once all are, after close, or when the
        counter's lock stays held (its holder was killed): the caller's caller does the rest."""
        lock = self._lock
        if not lock.acquire(timeout=_CLAIM_WAIT_S):
            return None
        try:
            k = self._next.value
            if k >= self._n:
                return None
            self._next.value = k + 1
        finally:
            lock.release()
        return k

    def close(self) -> None:
        """No position is handed out any more, to either side."""
        lock = self._lock
        if lock.acquire(timeout=_CLAIM_WAIT_S):
            try:
                self._next.value = self._n
            finally:
                lock.release()


def _child(ours: Connection, theirs: Connection, masked: set[int | signal.Signals], work: Callable[[Any], Any],
           extra: Callable[[], Any]) -> None:  # pragma: no cover - runs in the child
    """The child, from the fork on: never returns, and leaves with os._exit, so nothing of the
    parent's (its stack, buffers, atexit handlers, the proof store) runs or is written twice."""
    status = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # a Ctrl-C ends the child, running nothing
        signal.pthread_sigmask(signal.SIG_SETMASK, masked)
        ours.close()
        _close_inherited(theirs.fileno())
        results: list[Any] = []
        while (batch := theirs.recv()) is not None:
            results.extend(work(item) for item in batch)
        theirs.send((results, extra()))
        status = 0
    except BaseException:  # a bug: the parent does the work, and reports a bug itself
        pass
    finally:
        os._exit(status)


def _close_inherited(keep: int) -> None:  # pragma: no cover - runs in the child
    """Closes every descriptor the fork copied but stdio and `keep`: a pipe the child held open
    would keep its reader (the ONNX checker reading the model, another child reading its work)
    waiting for an end of input."""
    try:
        open_fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: a range, bounded (the limit may be a billion)
        open_fds = list(range(3, min(os.sysconf("SC_OPEN_MAX"), 1 << 16)))
    for fd in open_fds:
        if fd > 2 and fd != keep:
            try:
                os.close(fd)
            except OSError:  # the listing's own descriptor, already gone
                pass
