"""AscendC project emitter: one custom-operator project per fused op type and target, holding
every kernel variant of it (codegen/project.py, DESIGN section 5).

    <kernels_dir>/<file_stem>/                       (the msopgen `customize` layout)
        CMakeLists.txt, CMakePresets.json, build.sh, README.md, build_stamp.json
        op_host/CMakeLists.txt, <stem>_def.cpp, <stem>_infershape.cpp, <stem>_tiling.cpp
        op_kernel/CMakeLists.txt, <stem>.cpp, <stem>.h, <stem>_tiling_data.h, <stem>_tiling_key.h
        examples/CMakeLists.txt, test_aclnn_<stem>.cpp

Every path and identifier is built from the op type, contract parameter names and the variant
(codegen/variants.py); node names only reach README.md through codegen.names.safe_text. Output is
a pure function of the project: same kernels and target, same bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from codegen.emit.build_stamp import STAMP_FILE, build_stamp
from codegen.emit.host_src import def_cpp, infershape_cpp, tiling_cpp
from codegen.emit.kernel_src import kernel_cpp, kernel_h, tiling_data_h, tiling_key_h
from codegen.emit.project_files import (
    build_sh,
    cmake_presets,
    cmakelists,
    example_cmakelists,
    example_cpp,
    op_host_cmakelists,
    op_kernel_cmakelists,
    readme,
)
from codegen.errors import CodegenError
from codegen.names import check_identifier

if TYPE_CHECKING:
    from codegen.project import OperatorProject


def project_files(project: OperatorProject) -> dict[str, str]:
    """Relative path -> file text, in a fixed order."""
    stem = check_identifier(project.file_stem)
    for art in project.variants:
        check_identifier(art.variant_tag)
        for p in art.kernel.inputs + art.kernel.outputs:
            check_identifier(p.name)
    return {
        "CMakeLists.txt": cmakelists(project),
        "CMakePresets.json": cmake_presets(project),
        "README.md": readme(project),
        "build.sh": build_sh(project),
        STAMP_FILE: build_stamp(project),
        "examples/CMakeLists.txt": example_cmakelists(project),
        f"examples/test_aclnn_{stem}.cpp": example_cpp(project),
        "op_host/CMakeLists.txt": op_host_cmakelists(project),
        f"op_host/{stem}_def.cpp": def_cpp(project),
        f"op_host/{stem}_infershape.cpp": infershape_cpp(project),
        f"op_host/{stem}_tiling.cpp": tiling_cpp(project),
        "op_kernel/CMakeLists.txt": op_kernel_cmakelists(project),
        f"op_kernel/{stem}.cpp": kernel_cpp(project),
        f"op_kernel/{stem}.h": kernel_h(project),
        f"op_kernel/{stem}_tiling_data.h": tiling_data_h(project),
        f"op_kernel/{stem}_tiling_key.h": tiling_key_h(project),
    }


def emit_project(project: OperatorProject, kernels_dir: Path) -> list[Path]:
    """Write the project under kernels_dir/<file_stem>/; returns the paths written, sorted."""
    root = (kernels_dir / check_identifier(project.file_stem)).resolve()
    written = []
    for rel, text in project_files(project).items():
        path = (root / rel).resolve()
        if root not in path.parents:
            raise CodegenError(f"refusing to write outside {root}: {rel!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))
        if rel == "build.sh":
            path.chmod(0o755)
        written.append(path)
    return sorted(written)
