"""Fake CANN installs for the npu backend tests: the C sources in fake_cann/ compiled into a
toolkit tree (lib64/libascendcl.so, lib64/libnnopbase.so, opp/vendors/) and custom-op packages
installed into it the way the package's install.sh does (vendors/<name>/op_api/lib merged into
what is there, the vendor first in vendors/config.ini load_priority), or kept apart for
ASCEND_CUSTOM_OPP_PATH.

The fake aclnn API of the emitted operators takes its prototypes from a header written here from
the OpDefs lower emits (`aclnn_prototypes`), as op_build writes the aclnn API from an OpDef, so
the fake cannot drift from the operators lower generates.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from codegen.api import artifact_for_target, kernel_for_spec
from codegen.emit import project_files
from codegen.names import lower_camel
from codegen.nodes import InputSpec, NodeSpec
from codegen.project import OperatorProject, operator_projects
from codegen.registry import rule_for
from contracts.fused_ops import PROXIMAL_GD, SMOOTH_L1_GRAD

SOURCES = Path(__file__).resolve().parent / "fake_cann"
CC = shutil.which("gcc") or shutil.which("cc")
HEADER = "fake_aclnn_ops.h"


@dataclass(frozen=True)
class FakeLibraries:
    acl: Path
    nnop: Path
    opapi: Path  # every emitted operator
    per_op: dict[str, Path]  # op name -> a library of that operator alone, as its own package has
    opapi_needs_driver: Path  # needs libascend_hal.so, which no search path holds
    acl_needs_driver: Path


def emitted_operators() -> list[OperatorProject]:
    """One project per operator the two built-in fused ops emit (CANN's and the project's own)."""
    f32, shape = "float32", (4, 8)

    def sl1(scale: float) -> NodeSpec:
        return NodeSpec("sl1", SMOOTH_L1_GRAD, {r: InputSpec(f32, shape) for r in ("predict", "label", "dout")},
                        {"sigma": 1.0, "reduction": "mean", "scale": scale})

    def prox(form: str) -> NodeSpec:
        inputs = {"var": InputSpec(f32, shape), "delta": InputSpec(f32, shape),
                  **{r: InputSpec(f32, ()) for r in ("alpha", "l1", "l2")}}
        return NodeSpec("prox", PROXIMAL_GD, inputs, {"scalar_form": form, "shrink_max": math.inf})

    specs = [sl1(1.0), sl1(0.5), prox("raw"), prox("folded")]
    projects = operator_projects([artifact_for_target(kernel_for_spec(s), "ascend950") for s in specs])
    names = {op.name for op_type in (SMOOTH_L1_GRAD, PROXIMAL_GD) for op in rule_for(op_type).operators}
    assert {p.op_name for p in projects} == names, "a spec per emitted operator"
    return projects


# op_build's C type of each OpDef attribute type (asc-devkit's op_build tests)
_ATTR_C_TYPES = {"Float": "double ", "String": "char *", "Bool": "bool ", "Int": "int64_t "}


def opdef_parameters(def_cpp: str) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """(inputs, [(attribute, OpDef type)], outputs) of an emitted OpDef, in its order."""
    inputs = re.findall(r'this->Input\("(\w+)"\)', def_cpp)
    outputs = re.findall(r'this->Output\("(\w+)"\)', def_cpp)
    attrs = re.findall(r'this->Attr\("(\w+)"\)\.AttrType\(\w+\)\.(\w+)\(', def_cpp)
    return inputs, attrs, outputs


def aclnn_prototypes(projects: list[OperatorProject]) -> str:
    """The aclnn API op_build generates for each project's OpDef: aclnn<Op>GetWorkspaceSize(inputs,
    attributes, outputs, workspaceSize, executor) and aclnn<Op>(workspace, size, executor, stream)."""
    lines = ["/* The aclnn API of the operators lower emits, written by npu_fakes.py from their OpDefs. */",
             "#ifndef FAKE_ACLNN_OPS_H", "#define FAKE_ACLNN_OPS_H", "#include <stdbool.h>", '#include "fake_acl.h"']
    for project in projects:
        inputs, attrs, outputs = opdef_parameters(project_files(project)[f"op_host/{project.file_stem}_def.cpp"])
        if set(inputs) & set(outputs):
            raise AssertionError(f"{project.op_name}: an output named like an input (one Ref parameter) is not faked")
        params = [f"const aclTensor *{lower_camel(n)}" for n in inputs]
        params += [f"{_ATTR_C_TYPES[kind]}{lower_camel(n)}" for n, kind in attrs]
        params += [f"aclTensor *{lower_camel(n)}" for n in outputs]
        op = project.op_name
        lines += [f"aclnnStatus aclnn{op}GetWorkspaceSize({', '.join(params)}, uint64_t *workspaceSize, "
                  "aclOpExecutor **executor);",
                  f"aclnnStatus aclnn{op}(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, "
                  "aclrtStream stream);"]
    return "\n".join([*lines, "#endif", ""])


def _cc(out: Path, source: str, *extra: str) -> Path:
    assert CC is not None
    proc = subprocess.run([CC, "-std=c11", "-O1", "-fPIC", "-shared", "-Wall", "-Werror", f"-Wl,-soname,{out.name}",
                           "-I", str(SOURCES), "-o", str(out), str(SOURCES / source), *extra, "-lm", "-lpthread"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"{source} -> {out}:\n{proc.stderr}"
    return out


def compile_fakes(out: Path) -> FakeLibraries:
    """Every fake library, built once into `out` (the variants under their own folders)."""
    base, driver, needs, include = out / "base", out / "driver", out / "needs_driver", out / "include"
    for d in (base, driver, needs, include):
        d.mkdir(parents=True)
    projects = emitted_operators()
    (include / HEADER).write_text(aclnn_prototypes(projects))
    acl = _cc(base / "libascendcl.so", "ascendcl.c")
    nnop = _cc(base / "libnnopbase.so", "nnopbase.c")
    link_acl = (f"-L{base}", "-lascendcl")

    def opapi(path: Path, ops: list[str], *extra: str) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        return _cc(path, "cust_opapi.c", "-I", str(include), *(f"-DFAKE_OP_{op}" for op in ops), *extra, *link_acl)

    names = [p.op_name for p in projects]
    every = opapi(base / "libcust_opapi.so", names)
    per_op = {op: opapi(out / "ops" / op / "libcust_opapi.so", [op]) for op in names}
    hal = driver / "libascend_hal.c"
    hal.write_text("int halFakeVersion(void) { return 1; }\n")
    subprocess.run([CC, "-fPIC", "-shared", "-Wl,-soname,libascend_hal.so", "-o", str(driver / "libascend_hal.so"),
                    str(hal)], check=True, capture_output=True)
    acl_hal = _cc(needs / "libascendcl.so", "ascendcl.c", "-Wl,--no-as-needed", f"-L{driver}", "-lascend_hal")
    opapi_hal = opapi(needs / "libcust_opapi.so", names, "-Wl,--no-as-needed", f"-L{driver}", "-lascend_hal")
    return FakeLibraries(acl, nnop, every, per_op, opapi_hal, acl_hal)


def make_toolkit(home: Path, libs: FakeLibraries, acl: Path | None = None) -> Path:
    """A toolkit tree at `home` (lib64 and an empty opp/vendors); returns home."""
    (home / "lib64").mkdir(parents=True)
    (home / "opp" / "vendors").mkdir(parents=True)
    shutil.copy(acl or libs.acl, home / "lib64" / "libascendcl.so")
    shutil.copy(libs.nnop, home / "lib64" / "libnnopbase.so")
    return home


def stage_package(staging: Path, vendor: str, library: Path, stamps: dict[str, str] | None = None) -> Path:
    """What a built custom_opp_*.run unpacks: packages/vendors/<vendor>/op_api/lib with the aclnn
    library and the build stamps (file name -> text); returns the staging root."""
    lib_dir = staging / "packages" / "vendors" / vendor / "op_api" / "lib"
    lib_dir.mkdir(parents=True)
    shutil.copy(library, lib_dir / "libcust_opapi.so")
    for name, text in (stamps or {}).items():
        (lib_dir / name).write_text(text)
    return staging


def run_install(staging: Path, vendors: Path) -> None:
    """What the package's install.sh does with a staged package for `<opp>/vendors`: merge every
    staged vendor directory into the one of its name (`cp -rf`: same paths overwritten, others
    kept), then put the vendor first in config.ini's load_priority after deleting its name from
    the line as a plain substring, as the oldest template versions do (newer ones delete it as a
    word)."""
    for source in sorted((staging / "packages" / "vendors").iterdir()):
        shutil.copytree(source, vendors / source.name, dirs_exist_ok=True)
        config = vendors / "config.ini"
        found = ""
        if config.is_file():
            for line in config.read_text().splitlines():
                key, sep, value = line.partition("=")
                if sep and key.strip() == "load_priority":
                    found = value
                    break
        rest = found.replace(source.name, "").replace(",", " ").split()
        config.write_text("load_priority=" + ",".join([source.name, *rest]) + "\n")


def install_package(vendor_dir: Path, library: Path, stamps: dict[str, str] | None = None) -> Path:
    """A custom-op package at vendor_dir (op_api/lib/libcust_opapi.so and build stamps by name);
    under <opp>/vendors/ it is installed as install.sh installs it (`run_install`), elsewhere it
    is a directory for ASCEND_CUSTOM_OPP_PATH."""
    with tempfile.TemporaryDirectory() as tmp:
        staging = stage_package(Path(tmp), vendor_dir.name, library, stamps)
        if vendor_dir.parent.name == "vendors":
            run_install(staging, vendor_dir.parent)
        else:
            shutil.copytree(staging / "packages" / "vendors" / vendor_dir.name, vendor_dir)
    return vendor_dir
