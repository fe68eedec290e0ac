"""Progress on stderr for a diff that runs long, whatever made it long (big tensors, many nodes).

Silent for the first DELAY seconds; after that one line at most every INTERVAL seconds, naming
the current stage and how far it got, and a last line when the run ends. A background thread
prints the lines, so one long onnxruntime call in the main thread is covered as well.

    with Progress("lower diff") as progress:
        progress.stage("fused model", total=len(nodes))
        for node in nodes:
            ...
            progress.advance()
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

DELAY = 2.0  # seconds of silence before the first line: short runs print nothing
INTERVAL = 5.0  # seconds between two lines at most once
_TICK = 0.1  # how often the thread looks at the clock


class Progress:
    """Tracks the stage of a run; once started (as a context manager), reports it when slow."""

    def __init__(self, prefix: str, enabled: bool = True, stream: TextIO | None = None,
                 delay: float | None = None, interval: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.prefix = prefix
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.delay = DELAY if delay is None else delay
        self.interval = INTERVAL if interval is None else interval
        self.clock = clock
        self.start = clock()
        self.lines = 0
        self._last_line = -float("inf")
        self._stage = ""
        self._done = 0
        self._total = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def stage(self, text: str, total: int = 0) -> None:
        """A new stage; `total` > 0 counts the steps `advance` reports."""
        with self._lock:
            self._stage, self._done, self._total = text, 0, total

    def advance(self, steps: int = 1) -> None:
        self._done += steps  # read by the thread without the lock: a stale count is harmless

    def poll(self) -> None:
        """Print the current stage if the run is past DELAY and the last line is INTERVAL old."""
        if not self.enabled:
            return
        now = self.clock()
        if now - self.start < self.delay or now - self._last_line < self.interval:
            return
        with self._lock:
            text = self._stage
            if self._total:
                text += f": {min(self._done, self._total)}/{self._total}"
        self._print(now, text)

    def finish(self) -> None:
        """The closing line, when the run was long enough to have printed any."""
        if self.enabled and self.lines:
            self._print(self.clock(), "done")

    def _print(self, now: float, text: str) -> None:
        self._last_line = now
        self.lines += 1
        try:
            print(f"{self.prefix}: [{now - self.start:6.1f} s] {text}", file=self.stream, flush=True)
        except (OSError, ValueError):  # stderr closed or a broken pipe: progress is not worth an error
            self.enabled = False

    def _watch(self) -> None:
        while not self._stop.wait(_TICK):
            self.poll()

    def __enter__(self) -> Progress:
        self.start = self.clock()
        if self.enabled:
            self._thread = threading.Thread(target=self._watch, name="diff-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if exc_type is None:
            self.finish()
