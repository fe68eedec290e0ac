"""Progress lines on stderr for diffs that take a while (large inputs); silent otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO

# Below this many input elements a diff takes well under a second: no progress lines.
LONG_RUN_ELEMENTS = 1 << 20


class Progress:
    """Call with a stage description; when enabled, prints it with the elapsed time."""

    def __init__(self, prefix: str, enabled: bool, stream: TextIO | None = None) -> None:
        self.prefix = prefix
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.perf_counter()

    def __call__(self, stage: str) -> None:
        if self.enabled:
            elapsed = time.perf_counter() - self.start
            print(f"{self.prefix}: [{elapsed:6.1f} s] {stage}", file=self.stream, flush=True)
