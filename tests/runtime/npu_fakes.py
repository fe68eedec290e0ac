"""Fake CANN installs for the npu backend tests: the C sources in fake_cann/ compiled into a
toolkit tree (lib64/libascendcl.so, lib64/libnnopbase.so, opp/vendors/) and custom-op packages
installed into it the way the package's install.sh does (vendors/<name>/op_api/lib and the
vendor first in vendors/config.ini load_priority), or kept apart for ASCEND_CUSTOM_OPP_PATH.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SOURCES = Path(__file__).resolve().parent / "fake_cann"
CC = shutil.which("gcc") or shutil.which("cc")


@dataclass(frozen=True)
class FakeLibraries:
    acl: Path
    nnop: Path
    opapi: Path  # both operators
    opapi_proximal_only: Path  # aclnnApplyProximalGradientDescent* only
    opapi_needs_driver: Path  # needs libascend_hal.so, which no search path holds
    acl_needs_driver: Path


def _cc(out: Path, source: str, *extra: str) -> Path:
    assert CC is not None
    subprocess.run([CC, "-std=c11", "-O1", "-fPIC", "-shared", "-Wall", "-Werror", f"-Wl,-soname,{out.name}",
                    "-o", str(out), str(SOURCES / source), *extra, "-lm", "-lpthread"], check=True,
                   capture_output=True)
    return out


def compile_fakes(out: Path) -> FakeLibraries:
    """Every fake library, built once into `out` (the variants under their own folders)."""
    base, other, driver = out / "base", out / "other", out / "driver"
    for d in (base, other, driver, out / "needs_driver"):
        d.mkdir(parents=True)
    acl = _cc(base / "libascendcl.so", "ascendcl.c")
    nnop = _cc(base / "libnnopbase.so", "nnopbase.c")
    link_acl = (f"-L{base}", "-lascendcl")
    opapi = _cc(base / "libcust_opapi.so", "cust_opapi.c", *link_acl)
    prox = _cc(other / "libcust_opapi.so", "cust_opapi.c", "-DFAKE_WITHOUT_SMOOTH_L1", *link_acl)
    hal = driver / "libascend_hal.c"
    hal.write_text("int halFakeVersion(void) { return 1; }\n")
    subprocess.run([CC, "-fPIC", "-shared", "-Wl,-soname,libascend_hal.so", "-o", str(driver / "libascend_hal.so"),
                    str(hal)], check=True, capture_output=True)
    needs = out / "needs_driver"
    acl_hal = _cc(needs / "libascendcl.so", "ascendcl.c", "-Wl,--no-as-needed", f"-L{driver}", "-lascend_hal")
    opapi_hal = _cc(needs / "libcust_opapi.so", "cust_opapi.c", "-Wl,--no-as-needed", f"-L{driver}",
                    "-lascend_hal", *link_acl)
    return FakeLibraries(acl, nnop, opapi, prox, opapi_hal, acl_hal)


def make_toolkit(home: Path, libs: FakeLibraries, acl: Path | None = None) -> Path:
    """A toolkit tree at `home` (lib64 and an empty opp/vendors); returns home."""
    (home / "lib64").mkdir(parents=True)
    (home / "opp" / "vendors").mkdir(parents=True)
    shutil.copy(acl or libs.acl, home / "lib64" / "libascendcl.so")
    shutil.copy(libs.nnop, home / "lib64" / "libnnopbase.so")
    return home


def install_package(vendor_dir: Path, library: Path, stamps: dict[str, str] | None = None) -> Path:
    """A custom-op package at vendor_dir (op_api/lib/libcust_opapi.so and build stamps by name);
    under <opp>/vendors/ it also goes first in config.ini load_priority, as install.sh puts it."""
    lib_dir = vendor_dir / "op_api" / "lib"
    lib_dir.mkdir(parents=True)
    shutil.copy(library, lib_dir / "libcust_opapi.so")
    for name, text in (stamps or {}).items():
        (lib_dir / name).write_text(text)
    if vendor_dir.parent.name == "vendors":
        config = vendor_dir.parent / "config.ini"
        names = []
        if config.is_file():
            names = config.read_text().split("=", 1)[1].strip().split(",")
        config.write_text("load_priority=" + ",".join([vendor_dir.name] + [n for n in names if n != vendor_dir.name])
                          + "\n")
    return vendor_dir
