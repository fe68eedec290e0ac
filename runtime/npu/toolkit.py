"""Where the CANN toolkit is, looked for in CANN's own order.

1. `ASCEND_HOME_PATH`, 2. `ASCEND_TOOLKIT_HOME` (the toolkit's set_env.sh exports both, equal),
3. the default install paths: 8.x puts the toolkit in `<root>/ascend-toolkit/latest` (its
set_env.sh one level up), newer releases in `<root>/cann` (set_env.sh inside), where `<root>` is
`/usr/local/Ascend` for a root install and `$HOME/Ascend` otherwise.

The first of these that holds lib64/libascendcl.so is the toolkit. An environment variable that
is set but names something else is passed over, and the Toolkit says so (`passed_over`), since
the libraries it does load then come from another install than the environment names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runtime.backend import BackendError

ACL_LIBRARY = "libascendcl.so"
NNOP_LIBRARY = "libnnopbase.so"
ENV_VARS = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")


def default_roots() -> tuple[Path, ...]:
    """Where the installer puts CANN unless told otherwise: root, then non-root installs."""
    return (Path("/usr/local/Ascend"), Path.home() / "Ascend")


@dataclass(frozen=True)
class Toolkit:
    home: Path
    source: str  # how it was found: "ASCEND_HOME_PATH", "the default 8.x install", ...
    opp_path: Path  # ASCEND_OPP_PATH, else home/opp
    opp_source: str
    passed_over: tuple[str, ...] = field(default=())  # env vars that named no toolkit, with why

    def library(self, name: str) -> Path:
        return self.home / "lib64" / name

    @property
    def set_env(self) -> Path:
        """The set_env.sh that sets this toolkit's environment (8.x: one level up)."""
        for candidate in (self.home / "set_env.sh", self.home.parent / "set_env.sh"):
            if candidate.is_file():
                return candidate
        return self.home.parent / "set_env.sh"

    def describe(self) -> str:
        return f"CANN toolkit {self.home} ({self.source})"


def candidates(env: Mapping[str, str], roots: Sequence[Path]) -> list[tuple[str, Path | None]]:
    """(how, path) in the order they are tried; an unset variable has path None."""
    found: list[tuple[str, Path | None]] = [(var, Path(env[var]) if env.get(var) else None) for var in ENV_VARS]
    for layout, sub in (("8.x", Path("ascend-toolkit/latest")), ("newer", Path("cann"))):
        for kind, root in zip(("root", "non-root"), roots):
            found.append((f"the default {layout} {kind} install", root / sub))
    return found


def _problem(path: Path) -> str | None:
    if not path.is_dir():
        return "no such directory"
    if not (path / "lib64" / ACL_LIBRARY).is_file():
        return f"no lib64/{ACL_LIBRARY}"
    return None


def find_toolkit(env: Mapping[str, str] | None = None, roots: Sequence[Path] | None = None) -> Toolkit:
    """The toolkit, or BackendError listing every place looked at and what each lacked."""
    env = os.environ if env is None else env
    looked: list[tuple[str, str]] = []
    passed_over: list[str] = []
    for how, path in candidates(env, default_roots() if roots is None else roots):
        if path is None:
            looked.append((how, "not set"))
            continue
        problem = _problem(path)
        if problem is None:
            opp = env.get("ASCEND_OPP_PATH")
            opp_path, opp_source = (Path(opp), "ASCEND_OPP_PATH") if opp else (path / "opp", "the toolkit's opp")
            return Toolkit(path, how, opp_path, opp_source, tuple(passed_over))
        looked.append((f"{how}={path}" if how in ENV_VARS else str(path), problem))
        if how in ENV_VARS:
            passed_over.append(f"{how}={path} ({problem})")
    raise BackendError("npu backend: no CANN toolkit found; looked at, in order, " + _grouped(looked)
                       + ". Install the toolkit and source its set_env.sh, or use --backend cpu")


def _grouped(looked: list[tuple[str, str]]) -> str:
    """'a, b (not set); c, d (no such directory)': places in order, each run of one problem once."""
    runs: list[tuple[list[str], str]] = []
    for where, problem in looked:
        if runs and runs[-1][1] == problem:
            runs[-1][0].append(where)
        else:
            runs.append(([where], problem))
    return "; ".join(f"{', '.join(places)} ({problem})" for places, problem in runs)
