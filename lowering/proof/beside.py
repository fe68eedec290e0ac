"""Proofs beside the pass: the syntactic forms' matches proved in a forked child while the pass
matches on.

Proving a match costs a walk over its nodes and, for a family of forms no proof covers yet, solver
calls; on a graph with thousands of matches that is a large share of the pass. None of it changes
what the pass does next unless a proof fails, which for a form's match is rare: so on a large
graph, with a second core, the `lower` command forks a child once the graph is indexed, hands it
each form match as the pass finds it, and goes on as if the match were proved. Before anything is
rewritten the pass takes the child's verdicts: when every match holds, the result is the one a
proof in line would give; when one does not, the pass runs the graph again with its proofs in
line (the verdicts the child found are cached by then, so that costs matching, not proving).

A fork copies nothing until either side writes, and the child only reads the graph. It is used
only where this process is the pass's own (the `lower` command), never inside a caller's process,
whose threads and handles a fork would inherit. A child that fails in any way is replaced by the
proofs in this process: the verdicts are the same, only later.
"""

from __future__ import annotations

import os
import queue
import threading
import warnings
from multiprocessing.connection import Connection, Pipe

from ..algebra import Algebra
from ..loading import usable_cpus
from ..patterns.base import Match
from . import prove

MIN_NODES = 20_000  # below this the fork and the hand-over cost more than the proofs they move
_BATCH = 256  # matches per message: one pickle each, not one per match


class ProofsBeside:
    """A forked child proving the matches `submit` hands it, in order; `verdicts` collects them."""

    def __init__(self, alg: Algebra, assume_finite: bool) -> None:
        ours, theirs = Pipe()
        with warnings.catch_warnings():
            # a fork beside the ONNX checker's feeder thread: the child runs only _serve, which
            # takes none of the locks that thread may hold
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's coverage is not collected
            ours.close()
            _serve(theirs, alg, assume_finite)
        theirs.close()
        self._pid: int | None = pid
        self._conn = ours
        self._batch: list[Match] = []
        self._outbox: queue.SimpleQueue[list[Match] | None] = queue.SimpleQueue()
        self._sent_all = True
        # the sends run in a thread: a child busy with a solver call must not hold up matching
        self._feeder = threading.Thread(target=self._feed, daemon=True)
        self._feeder.start()

    @classmethod
    def start(cls, alg: Algebra, assume_finite: bool) -> ProofsBeside | None:
        """A child for a graph worth it on a machine with a second core, else None."""
        if len(alg.index.nodes) < MIN_NODES or not hasattr(os, "fork") or usable_cpus() < 2:
            return None
        try:
            return cls(alg, assume_finite)
        except OSError:  # no process to be had: the proofs run in line
            return None

    def submit(self, match: Match) -> None:
        self._batch.append(match)
        if len(self._batch) >= _BATCH:
            self._outbox.put(self._batch)
            self._batch = []

    def verdicts(self) -> list[prove.Verdict] | None:
        """The verdict of every submitted match, in order, with the child's new proofs taken into
        this process's cache; None when the child failed (the caller proves them itself)."""
        if self._batch:
            self._outbox.put(self._batch)
            self._batch = []
        self._outbox.put(None)
        self._feeder.join()
        try:
            if not self._sent_all:
                return None
            results, proved = self._conn.recv()
        except (EOFError, OSError):
            return None
        finally:
            self.stop()
        prove.absorb(proved)
        return results

    def stop(self) -> None:
        """Ends the child (at once, if it still runs) and reaps it."""
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
                except (OSError, ValueError):  # the child is gone; verdicts() proves in line
                    self._sent_all = False
        if self._sent_all:
            try:
                self._conn.send(None)
            except (OSError, ValueError):
                self._sent_all = False


def _serve(conn: Connection, alg: Algebra, assume_finite: bool) -> None:  # pragma: no cover - runs in the child
    """The child: proves each match it receives, then sends the verdicts and the proofs it made.
    It never returns: it leaves with os._exit, so nothing of the parent's (buffers, atexit
    handlers, the proof store) is flushed or written twice."""
    status = 1
    try:
        _close_inherited(conn.fileno())
        before = set(prove.cached_verdicts())
        results: list[prove.Verdict] = []
        while (batch := conn.recv()) is not None:
            results.extend(prove.prove(alg, m, assume_finite) for m in batch)
        made = {k: v for k, v in prove.cached_verdicts().items() if k not in before}
        conn.send((results, made))
        status = 0
    except BaseException:  # a bug or Ctrl-C: the parent proves in line, and reports a bug itself
        pass
    finally:
        os._exit(status)


def _close_inherited(keep: int) -> None:  # pragma: no cover - runs in the child
    """Closes every descriptor the fork copied but stdio and `keep`: a pipe the child held open
    would keep its reader (the ONNX checker reading the model) waiting for an end of input."""
    limit = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1 << 16
    os.closerange(3, keep)
    os.closerange(keep + 1, max(limit, keep + 1))
