"""Which installed custom-op package serves an operator, found as CANN finds it.

CANN looks for the aclnn API of a custom operator in `<package>/op_api/lib/libcust_opapi.so` of:
1. each entry of `ASCEND_CUSTOM_OPP_PATH` (':'-separated), in order (a package installed with
   `--install-path` adds its entry at the front, through its bin/set_env.bash);
2. the vendors that `ASCEND_OPP_PATH/vendors/config.ini` lists in its `load_priority=a,b,...`
   line, in that order (installing a package puts its vendor first). A vendor directory that the
   line does not name is not loaded at all.
The first library that exports `aclnn<Op>GetWorkspaceSize` serves the operator. Every operator
lower emits is a package of its own, installed as its own vendor (codegen/emit/vendor.py), so
the operators of one model come from as many vendor directories; a missing operator's error names
the vendor its package installs as, and says so when that directory is there but not loaded.

The package `lower`'s kernels build into installs a build stamp beside its library
(codegen/emit/build_stamp.py); `stamp_problem` compares it with the kernel this run needs, so an
older package that shadows the one just built is reported rather than silently run.
"""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from codegen.artifact import KernelArtifact
from codegen.emit.build_stamp import GENERATOR, installed_stamp_name, kernel_digest
from codegen.emit.vendor import vendor_name
from codegen.names import snake_case
from lowering.terminal import printable
from runtime.backend import BackendError
from runtime.npu.libraries import load_library

OPAPI_LIBRARY = "libcust_opapi.so"


@dataclass(frozen=True)
class OpPackage:
    root: Path  # the vendor directory (holds op_api/, op_impl/, ...)
    source: str  # why it is searched, e.g. "vendors/config.ini load_priority #1"

    @property
    def library(self) -> Path:
        return self.root / "op_api" / "lib" / OPAPI_LIBRARY

    @property
    def set_env(self) -> Path:
        return self.root / "bin" / "set_env.bash"

    def describe(self) -> str:
        return f"{self.root} ({self.source})"


@dataclass(frozen=True)
class PackageSearch:
    packages: tuple[OpPackage, ...]  # those with a library, in CANN's order
    looked: tuple[str, ...] = field(default=())  # every place looked at that gave no package, and why
    unlisted: tuple[Path, ...] = field(default=())  # vendor directories load_priority does not name


def load_priority(config: Path) -> list[str]:
    """The vendor names of config.ini's load_priority line, in order (empty when there is none)."""
    try:
        lines = config.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip() == "load_priority":
            names = [v.strip() for v in value.split(",") if v.strip()]
            return list(dict.fromkeys(names))  # a name listed twice is loaded at its first place
    return []


def find_packages(opp_path: Path, opp_source: str, env: Mapping[str, str] | None = None) -> PackageSearch:
    """Every custom-op package CANN would search, in its order."""
    env = os.environ if env is None else env
    found: list[OpPackage] = []
    looked: list[str] = []

    def consider(package: OpPackage) -> None:
        if package.library.is_file():
            found.append(package)
        else:
            looked.append(f"{package.root} ({package.source}): no op_api/lib/{OPAPI_LIBRARY}")

    custom = [p for p in env.get("ASCEND_CUSTOM_OPP_PATH", "").split(":") if p]
    if not custom:
        looked.append("ASCEND_CUSTOM_OPP_PATH (not set)")
    for i, entry in enumerate(custom, 1):
        consider(OpPackage(Path(entry), f"ASCEND_CUSTOM_OPP_PATH entry {i}"))
    vendors = opp_path / "vendors"
    config = vendors / "config.ini"
    names = load_priority(config)
    if not names:
        looked.append(f"{config} ({opp_source}): " + ("no load_priority line" if config.is_file() else "missing"))
    for i, name in enumerate(names, 1):
        if name in (".", "..") or "/" in name:
            looked.append(f"{config}: load_priority names {printable(name)!r}, not a vendor directory")
            continue
        consider(OpPackage(vendors / name, f"{opp_source} vendors/config.ini load_priority #{i}"))
    unlisted = sorted(p for p in vendors.iterdir() if p.is_dir() and p.name not in names) if vendors.is_dir() else []
    for extra in unlisted:
        looked.append(f"{extra}: installed but not in {config.name} load_priority, so CANN does not load it")
    return PackageSearch(tuple(found), tuple(looked), tuple(unlisted))


def stamp_problem(library: Path, art: KernelArtifact) -> str | None:
    """Why the package of `library` was not built from `art`'s kernel, or None when it was."""
    path = library.parent / installed_stamp_name(art.file_stem)
    if not path.is_file():
        return f"it has no build stamp ({path.name}), so it was not built from kernels lower generated"
    try:
        stamp = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        stamp = None
    if not isinstance(stamp, dict) or stamp.get("generator") != GENERATOR or not isinstance(stamp.get("kernels"), dict):
        return f"its build stamp {path} is not one lower wrote"
    if stamp.get("target") != art.target.name:
        return f"it was built for {printable(str(stamp.get('target')))}, not {art.target.name}"
    digest = stamp["kernels"].get(str(art.key_base))
    variant = f"variant {art.variant_tag} ({art.variant_label})"
    if digest is None:
        return f"it was built from other kernels: it lacks {variant}"
    if digest != kernel_digest(art):
        return f"its kernel for {variant} differs from the one lower generates for this model"
    return None


@dataclass(frozen=True)
class OpEntry:
    """The aclnn API of one operator and the package it comes from."""

    package: OpPackage
    get_workspace_size: Callable[..., int]
    launch: Callable[..., int]


class OpResolver:
    """Finds each operator's aclnn API in the packages, in order, loading each library once."""

    def __init__(self, search: PackageSearch, notify: Callable[[str], None]) -> None:
        self.search = search
        self._notify = notify
        self._libraries: dict[Path, ctypes.CDLL | BackendError] = {}

    def _library(self, package: OpPackage) -> ctypes.CDLL | BackendError:
        if package.library not in self._libraries:
            setup = (f"source {package.set_env}" if package.set_env.is_file()
                     else f"add {package.library.parent} to LD_LIBRARY_PATH")
            try:
                self._libraries[package.library] = load_library(package.library, setup, package.library.parent)
            except BackendError as exc:
                self._libraries[package.library] = exc
        return self._libraries[package.library]

    def resolve(self, op_name: str) -> OpEntry:
        unloadable: list[str] = []
        for package in self.search.packages:
            lib = self._library(package)
            if isinstance(lib, BackendError):
                unloadable.append(str(lib))
                continue
            phase1 = getattr(lib, f"aclnn{op_name}GetWorkspaceSize", None)
            phase2 = getattr(lib, f"aclnn{op_name}", None)
            if phase1 is not None and phase2 is not None:
                for reason in unloadable:
                    self._notify(f"passed over: {reason}")
                self._notify(f"aclnn{op_name} from {package.library} ({package.source})")
                return OpEntry(package, phase1, phase2)
        searched = [f"{p.library} ({p.source})" for p in self.search.packages]
        vendor = vendor_name(op_name)
        unlisted = [p for p in self.search.unlisted if p.name == vendor]
        hint = (f" {unlisted[0]} is installed, but vendors/config.ini's load_priority does not name {vendor}, so "
                f"CANN does not load it: add {vendor} to that line or reinstall the package." if unlisted else "")
        raise BackendError(
            f"npu backend: no installed custom-op package has aclnn{op_name}; searched "
            + ("; ".join(searched) or "nothing") + "." + hint + "".join(f" {u}" for u in unloadable)
            + f" Build kernels/{snake_case(op_name)} (build.sh) and install its custom_opp_*.run, which installs "
            f"as vendor {vendor}")
