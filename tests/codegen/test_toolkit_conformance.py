"""The emitted operator projects against a real CANN toolkit tree: every op_kernel entry compiles
in the toolkit's CPU-debug mode, every op_host file with the op build's flags (-std=c++11), and
the project's own cmake configures against the tree.

A snapshot holds headers and cmake modules but no binaries, so the configure test lays an overlay
over it: empty stand-ins for the three libraries the op build links (libexe_graph, libregister,
libtiling_api; a shared object links with undefined symbols), and a stand-in for the op_build tool
that writes only the files op_build writes, named as it names them. The op build's compile of
op_host into a shared object is real.

Give the tree with ASCEND_TOOLKIT_TREE (an unpacked toolkit or a snapshot of one, e.g. the
8.1.RC1 tree: the directory holding `<arch>-linux/` or `include/`), else ASCEND_HOME_PATH; without
either the tests skip and say so. Targets whose compute unit the tree has no platform config for
(8.1.RC1 has no 950) skip the same way. The normal CI path, without a toolkit, is the twin
(tests/twin), which compiles and runs the same kernel sources against stub headers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import onnx
import pytest

from codegen.api import build_kernels
from codegen.emit import emit_project, project_files
from codegen.project import OperatorProject, operator_projects
from codegen.targets import TARGETS, Target
from lowering import fuse

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "twin"))  # twin_cases.py: every kernel variant's model

sys.path.insert(0, str(REPO / "tests" / "codegen"))  # template_presets.py
from template_presets import differences  # noqa: E402
from twin_cases import model_of, variants  # noqa: E402

CXX = shutil.which("g++")
# The kernel build stands in for the op build's generated tiling header, the one macro no toolkit
# header defines (8.1.RC1: python/site-packages/tbe/tikcpp/get_op_tiling.py writes it).
TILING_PRELUDE = """\
#define GET_TILING_DATA_WITH_STRUCT(tiling_struct, tiling_data, tiling_arg) \\
    tiling_struct tiling_data = *reinterpret_cast<__gm__ tiling_struct*>(tiling_arg)
"""
# tikicpulib's CPU-debug compile definitions per __CCE_AICORE__ generation
# (tools/tikicpulib/lib/cmake/targets-tikicpulib.cmake)
CPU_DEBUG_DEFINES = {
    2201: ["-D__CCE_AICORE__=220", "-D__DAV_C220__"],
}
COMMON_DEFINES = ["-D_GLIBCXX_USE_CXX11_ABI=0", "-D__CCE_KT_TEST__=1", "-DASCENDC_CPU_DEBUG=1", "-DASCENDC_DEBUG=1"]


@dataclass(frozen=True)
class Toolkit:
    root: Path
    include: Path  # acl, register, exe_graph, graph ...
    ascendc: Path  # ascendc/include: basic_api, highlevel_api
    cpulib: Path | None  # tools/tikicpulib/lib/include
    platform_configs: Path | None

    def has_unit(self, target: Target) -> bool:
        if self.platform_configs is None:
            return False
        return any(self.platform_configs.glob(f"{target.short_soc}*.ini"))


def _first_dir(*candidates: Path) -> Path | None:
    return next((c for c in candidates if c.is_dir()), None)


def find_toolkit() -> Toolkit | None:
    given = os.environ.get("ASCEND_TOOLKIT_TREE") or os.environ.get("ASCEND_HOME_PATH")
    if not given:
        return None
    root = Path(given)
    arch_dirs = sorted(root.glob("*-linux"))
    bases = [root, *arch_dirs]
    include = _first_dir(*(b / "include" for b in bases))
    ascendc = _first_dir(*(b / "ascendc" / "include" for b in bases), root / "compiler" / "ascendc" / "include")
    if include is None or ascendc is None or not (ascendc / "basic_api" / "kernel_operator.h").is_file():
        return None
    cpulib = _first_dir(root / "tools" / "tikicpulib" / "lib" / "include")
    configs = _first_dir(*(b / "data" / "platform_config" for b in bases))
    return Toolkit(root, include, ascendc, cpulib, configs)


TOOLKIT = find_toolkit()
NO_TOOLKIT = (
    "no CANN toolkit tree: set ASCEND_TOOLKIT_TREE to an unpacked toolkit (e.g. the 8.1.RC1 "
    "snapshot) to compile the emitted sources against its headers"
)


@pytest.fixture(scope="module")
def projects() -> dict[str, list[OperatorProject]]:
    if TOOLKIT is None:
        pytest.skip(NO_TOOLKIT)
    if CXX is None:
        pytest.skip("no g++ on PATH")
    models = [model_of(v, (256,)) for v in variants()]
    models += [onnx.load(p) for p in sorted([*REPO.glob("tests/fixtures/*/*.onnx"), *REPO.glob("models/*.onnx")])]
    fused = [fuse(m)[0] for m in models]
    return {t: operator_projects([a for m in fused for a in build_kernels(m, t)]) for t in TARGETS}


def _run(cmd: list[str], cwd: Path) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    return "" if proc.returncode == 0 else (proc.stderr or proc.stdout)[-3000:]


def _target(name: str) -> Target:
    t = TARGETS[name]
    assert TOOLKIT is not None
    if not TOOLKIT.has_unit(t):
        pytest.skip(f"the toolkit tree at {TOOLKIT.root} has no platform config for {t.compute_unit}")
    if t.npu_arch not in CPU_DEBUG_DEFINES:
        pytest.skip(f"no CPU-debug definitions known for __NPU_ARCH__ {t.npu_arch}")
    return t


@pytest.mark.parametrize("target", list(TARGETS))
def test_kernels_compile_in_cpu_debug_mode(projects, target, tmp_path: Path) -> None:
    t = _target(target)
    assert TOOLKIT is not None
    prelude = tmp_path / "op_build_tiling.h"
    prelude.write_text(TILING_PRELUDE)
    a = TOOLKIT.ascendc
    includes = [
        *(["-I", str(TOOLKIT.cpulib)] if TOOLKIT.cpulib else []),
        "-I", str(TOOLKIT.include),
        *[x for d in ("basic_api", "basic_api/impl", "basic_api/interface", "highlevel_api/lib",
                      "highlevel_api/impl", "highlevel_api") for x in ("-I", str(a / d))],
    ]
    for project in projects[target]:
        emit_project(project, tmp_path)
        kernel_dir = tmp_path / project.file_stem / "op_kernel"
        err = _run([CXX, "-fsyntax-only", "-std=c++17", *CPU_DEBUG_DEFINES[t.npu_arch], *COMMON_DEFINES,
                    *includes, "-include", str(prelude), f"{project.file_stem}.cpp"], kernel_dir)
        assert err == "", f"{project.op_name} for {target} ({len(project.variants)} variants):\n{err}"


@pytest.mark.parametrize("target", list(TARGETS))
def test_host_sources_compile_as_the_op_build_compiles_them(projects, target, tmp_path: Path) -> None:
    _target(target)
    assert TOOLKIT is not None
    for project in projects[target]:
        emit_project(project, tmp_path)
        host_dir = tmp_path / project.file_stem / "op_host"
        for source in sorted(host_dir.glob("*.cpp")):
            err = _run([CXX, "-fsyntax-only", "-std=c++11", "-D_GLIBCXX_USE_CXX11_ABI=0",
                        "-I", str(TOOLKIT.include), "-I", str(TOOLKIT.ascendc / "highlevel_api"),
                        "-I", "../op_kernel", source.name], host_dir)
            assert err == "", f"{source.name} for {target}:\n{err}"


def test_the_project_template_the_cmake_copies_exists() -> None:
    if TOOLKIT is None:
        pytest.skip(NO_TOOLKIT)
    from codegen.emit.project_files import TEMPLATE_DIR

    template = TOOLKIT.root / TEMPLATE_DIR
    if not template.is_dir():
        pytest.skip(f"the toolkit tree at {TOOLKIT.root} holds no tools/ directory")
    for name in ("cmake/config.cmake", "cmake/func.cmake", "cmake/intf.cmake", "cmake/makeself.cmake",
                 "cmake/util/gen_version_info.sh", "scripts/install.sh"):
        assert (template / name).is_file(), name
    func = (template / "cmake" / "func.cmake").read_text()
    for used in ("function(opbuild)", "function(add_kernels_compile)", "function(get_system_info",
                 "function(add_ops_compile_options"):
        assert used in func, used


def test_presets_have_the_cache_variables_of_the_toolkit_template(projects) -> None:
    """The emitted CMakePresets.json against the tree's own template preset (template_presets.py
    holds the rule and 8.1.RC1's list as a fact, for CI)."""
    from codegen.emit.project_files import TEMPLATE_DIR

    assert TOOLKIT is not None
    path = TOOLKIT.root / TEMPLATE_DIR / "CMakePresets.json"
    if not path.is_file():
        pytest.skip(f"the toolkit tree at {TOOLKIT.root} holds no template CMakePresets.json")
    template = json.loads(path.read_text())["configurePresets"][0]["cacheVariables"]
    for target, projs in projects.items():
        for project in projs:
            cache = json.loads(project_files(project)["CMakePresets.json"])["configurePresets"][0]["cacheVariables"]
            assert differences(cache, template) == [], f"{project.op_type} for {target}"


OP_BUILD_STANDIN = """#!/bin/sh
# stand-in for the toolkit's op_build: writes the files it would write, named as it names them
out="$2"
touch "$out/op_proto.cc" "$out/op_proto.h" "$out/aclnn_$STANDIN_OP_FILE.h" "$out/aclnn_$STANDIN_OP_FILE.cpp"
printf '[%s]\\nopFile.value=%s\\n' "$STANDIN_OP_TYPE" "$STANDIN_OP_FILE" > "$out/aic-$STANDIN_UNIT-ops-info.ini"
"""


def _overlay(tmp: Path) -> Path:
    """The toolkit tree as an install lays it out, with stand-ins for its binaries."""
    from codegen.emit.project_files import TEMPLATE_DIR

    assert TOOLKIT is not None
    root = tmp / "toolkit"
    (root / "include").mkdir(parents=True)
    for entry in TOOLKIT.include.iterdir():
        (root / "include" / entry.name).symlink_to(entry)
    tiling = TOOLKIT.ascendc / "highlevel_api" / "tiling"  # installs put it under include/
    if tiling.is_dir() and not (root / "include" / "tiling").exists():
        (root / "include" / "tiling").symlink_to(tiling)
    template = root / TEMPLATE_DIR
    template.parent.mkdir(parents=True)
    template.symlink_to(TOOLKIT.root / TEMPLATE_DIR)
    (root / "lib64").mkdir()
    empty = tmp / "empty.c"
    empty.write_text("")
    for lib in ("exe_graph", "register", "tiling_api"):
        gcc = shutil.which("gcc") or "gcc"
        err = _run([gcc, "-shared", "-o", str(root / "lib64" / f"lib{lib}.so"), str(empty)], tmp)
        assert err == "", err
    tool = root / "toolkit" / "tools" / "opbuild" / "op_build"
    tool.parent.mkdir(parents=True)
    tool.write_text(OP_BUILD_STANDIN)
    tool.chmod(0o755)
    return root


@pytest.mark.parametrize("target", list(TARGETS))
def test_cmake_configures_against_the_toolkit(projects, target, tmp_path: Path) -> None:
    t = _target(target)
    assert TOOLKIT is not None
    if shutil.which("cmake") is None:
        pytest.skip("no cmake on PATH")
    from codegen.emit.project_files import TEMPLATE_DIR

    if not (TOOLKIT.root / TEMPLATE_DIR).is_dir():
        pytest.skip(f"the toolkit tree at {TOOLKIT.root} holds no project template")
    root = _overlay(tmp_path)
    for project in projects[target]:
        emit_project(project, tmp_path / "src")
        src = tmp_path / "src" / project.file_stem
        env = {**os.environ, "STANDIN_OP_TYPE": project.op_type, "STANDIN_OP_FILE": project.file_stem,
               "STANDIN_UNIT": t.compute_unit}
        proc = subprocess.run(["cmake", "-S", ".", "--preset=default", f"-DASCEND_CANN_PACKAGE_PATH={root}"],
                              cwd=src, env=env, capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, f"{project.op_name} for {target}:\n{(proc.stderr or proc.stdout)[-3000:]}"
        autogen = src / "build_out" / "autogen"
        assert (autogen / "libascend_all_ops.so").is_file()  # the op build compiled op_host for real
        cache = (src / "build_out" / "CMakeCache.txt").read_text()
        assert f"ASCEND_COMPUTE_UNIT:STRING={t.compute_unit}" in cache


# asc-devkit HEAD (the AscendC headers of toolkits newer than 8.1, and the only public tree with
# ascend950) is a source tree: its CPU-debug stubs live in asc-tools (cpudebug/include), and the
# stubs of the compiler intrinsics (stub_fun.h), the graph headers and kernel_tiling/ come from a
# toolkit. Given ASC_DEVKIT_TREE and ASC_TOOLS_TREE plus a toolkit tree, every kernel compiles with
# no error at a line of an emitted file; errors inside the mixed headers (8.1's intrinsic stubs
# lack 3510's) are the headers', not the kernel's.
ASC_DEVKIT = os.environ.get("ASC_DEVKIT_TREE")
ASC_TOOLS = os.environ.get("ASC_TOOLS_TREE")


@pytest.mark.parametrize("target", list(TARGETS))
def test_kernels_compile_against_asc_devkit_head(projects, target, tmp_path: Path) -> None:
    if not (ASC_DEVKIT and ASC_TOOLS):
        pytest.skip("set ASC_DEVKIT_TREE (an asc-devkit checkout) and ASC_TOOLS_TREE (asc-tools) to "
                    "compile the kernels against asc-devkit HEAD")
    assert TOOLKIT is not None and TOOLKIT.cpulib is not None
    t = TARGETS[target]
    dev, tools = Path(ASC_DEVKIT), Path(ASC_TOOLS)
    includes = [tools / "cpudebug" / "include", TOOLKIT.cpulib, TOOLKIT.include, dev]
    includes += [dev / "impl" / d for d in ("adv_api", "basic_api", "c_api", "simt_api", "utils")]
    includes += [dev / "include" / d for d in ("", "adv_api", "adv_api/matmul", "basic_api", "c_api",
                                               "simt_api", "utils", "tiling")]
    includes.append(TOOLKIT.ascendc / "highlevel_api")  # kernel_tiling/
    prelude = tmp_path / "op_build_tiling.h"
    prelude.write_text(TILING_PRELUDE)
    flags = [f"-D__NPU_ARCH__={t.npu_arch}", *COMMON_DEFINES]
    for project in projects[target]:
        emit_project(project, tmp_path)
        kernel_dir = tmp_path / project.file_stem / "op_kernel"
        emitted = {p.name for p in kernel_dir.iterdir()}
        proc = subprocess.run([CXX, "-fsyntax-only", "-std=c++17", *flags,
                               *[x for d in includes for x in ("-isystem", str(d))],
                               "-include", str(prelude), f"{project.file_stem}.cpp"],
                              cwd=kernel_dir, capture_output=True, text=True, timeout=600, check=False)
        ours = [ln for ln in proc.stderr.splitlines()
                if "error" in ln and ln.split(":", 1)[0] in emitted]
        assert not ours, f"{project.op_name} for {target}:\n" + "\n".join(ours[:20])


_ACLNN_TYPES = {"float": "double", "string": "char *", "bool": "bool"}


def aclnn_header_standin(project: OperatorProject) -> str:
    """aclnn_<op>.h as op_build writes it (asc-devkit tests/tools/utils/opbuild/*.h.txt): inputs,
    then attributes (Float -> double, String -> char *, Bool -> bool), then outputs."""
    from codegen.op_interface import interface

    k = project.variants[0].kernel
    iface = interface(project.op_type)
    params = [f"const aclTensor *{p.name}" for p in k.inputs]
    params += [f"{_ACLNN_TYPES[a.kind]} {a.name}" for a in iface.attributes]
    params += [f"const aclTensor *{name}Out" for name in iface.outputs]
    op = project.op_type
    return "\n".join([
        '#include "aclnn/acl_meta.h"',
        'extern "C" {',
        f"aclnnStatus aclnn{op}GetWorkspaceSize({', '.join(params)}, uint64_t *workspaceSize,",
        "    aclOpExecutor **executor);",
        f"aclnnStatus aclnn{op}(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,",
        "    aclrtStream stream);",
        "}",
        "",
    ])


@pytest.mark.parametrize("target", list(TARGETS))
def test_the_aclnn_example_compiles_against_the_generated_api(projects, target, tmp_path: Path) -> None:
    _target(target)
    assert TOOLKIT is not None
    for project in projects[target]:
        emit_project(project, tmp_path)
        examples = tmp_path / project.file_stem / "examples"
        (examples / f"aclnn_{project.file_stem}.h").write_text(aclnn_header_standin(project))
        err = _run([CXX, "-fsyntax-only", "-std=c++11", "-I", ".", "-I", str(TOOLKIT.include),
                    "-I", str(TOOLKIT.include / "aclnn"), f"test_aclnn_{project.file_stem}.cpp"], examples)
        assert err == "", f"{project.op_name} example for {target}:\n{err}"


def test_the_aclnn_example_of_a_broadcast_variant_compiles(tmp_path: Path) -> None:
    """A project whose first variant broadcasts writes its example on [rows, cols] tensors with a
    column label and a row dout (the golden indexes them so)."""
    if TOOLKIT is None:
        pytest.skip(NO_TOOLKIT)
    if CXX is None:
        pytest.skip("no g++ on PATH")
    from codegen.api import artifact_for_target, kernel_for_spec
    from codegen.nodes import InputSpec, NodeSpec
    from codegen.project import project_of

    for dtype in ("float32", "float16", "bfloat16"):
        shapes = {"predict": (3, 4), "label": (3, 1), "dout": (4,)}
        spec = NodeSpec("n", "SmoothL1LossGradV2", {r: InputSpec(dtype, s) for r, s in shapes.items()},
                        {"sigma": 0.5, "reduction": "mean", "scale": 1.0})
        project = project_of([artifact_for_target(kernel_for_spec(spec), "ascend910b")])
        emit_project(project, tmp_path / dtype)
        examples = tmp_path / dtype / project.file_stem / "examples"
        text = (examples / f"test_aclnn_{project.file_stem}.cpp").read_text()
        assert "label[e / 229]" in text and "dout[e % 229]" in text
        (examples / f"aclnn_{project.file_stem}.h").write_text(aclnn_header_standin(project))
        err = _run([CXX, "-fsyntax-only", "-std=c++11", "-I", ".", "-I", str(TOOLKIT.include),
                    "-I", str(TOOLKIT.include / "aclnn"), f"test_aclnn_{project.file_stem}.cpp"], examples)
        assert err == "", f"{dtype}:\n{err}"
