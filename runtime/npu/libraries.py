"""Loading a CANN library with an error that names what is missing and how to get it.

The real libascendcl.so and libcust_opapi.so pull in dozens of libraries of the toolkit and the
driver through LD_LIBRARY_PATH, which the toolkit's set_env.sh (and a custom-op package's
bin/set_env.bash) set. The dynamic loader reads LD_LIBRARY_PATH once, when the process starts,
so the fix is always to source the script *before* starting Python.
"""

from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path

from runtime.backend import BackendError

_MISSING = re.compile(r"([^\s:/]+\.so[.\d]*): cannot open shared object file")


def load_library(path: Path, setup: str, lib_dir: Path | None = None) -> ctypes.CDLL:
    """dlopen `path`; on failure a BackendError naming the library that could not be loaded.

    `setup` says what to source (e.g. "source /usr/local/Ascend/ascend-toolkit/set_env.sh");
    `lib_dir` is where the library's companions live, checked against LD_LIBRARY_PATH.
    """
    if not path.is_file():
        raise BackendError(f"npu backend: {path} does not exist; {setup}")
    try:
        return ctypes.CDLL(str(path))
    except OSError as exc:
        reason = str(exc)
    found = _MISSING.search(reason)
    if found and found.group(1) != path.name:
        what = f"it needs {found.group(1)}, which the dynamic loader did not find"
    else:
        what = reason.replace("\n", " ")
    hint = ""
    if lib_dir is not None:
        paths = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
        if not any(Path(p) == lib_dir for p in paths):
            hint = f" (LD_LIBRARY_PATH does not include {lib_dir})"
    raise BackendError(f"npu backend: cannot load {path}: {what}{hint}; its libraries are found through "
                       f"LD_LIBRARY_PATH: {setup} before starting Python")
