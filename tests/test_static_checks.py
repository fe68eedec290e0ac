"""ruff and mypy, configured in pyproject.toml, run as part of the test command CI runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("tool", [["ruff", "check", "."], ["mypy"]], ids=["ruff", "mypy"])
def test_static_check_is_clean(tool: list[str], tmp_path: Path) -> None:
    extra = ["--cache-dir", str(tmp_path / "cache")] if tool[0] == "mypy" else ["--no-cache"]
    proc = subprocess.run([sys.executable, "-m", *tool, *extra], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
