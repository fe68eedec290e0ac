"""Project-level files: CMakeLists.txt, build.sh, the aclnn example and README.md."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

from codegen.emit.build_stamp import STAMP_FILE, installed_stamp_name
from codegen.emit.cxx import ACL_TYPES, BANNER, host_float_literal
from codegen.emit.golden import golden_function
from codegen.emit.vendor import vendor_name
from codegen.ir import Kind, Param
from codegen.names import safe_text
from codegen.op_interface import call_attributes, contract, interface, is_cann
from codegen.schedule import TILE_ALIGN, UB_RESERVE_BYTES, VARIANT_SHIFT
from codegen.variants import axes_of

if TYPE_CHECKING:
    from codegen.artifact import KernelArtifact
    from codegen.project import OperatorProject

EXAMPLE_ELEMENTS = 8 * 1024 + 37  # a partial last tile on purpose
# a variant with broadcast inputs runs on [EXAMPLE_ROWS, EXAMPLE_COLS] (a partial last tile too), its
# broadcast inputs alternately a column [EXAMPLE_ROWS, 1] and a row [1, EXAMPLE_COLS]
EXAMPLE_ROWS, EXAMPLE_COLS = 37, 229


TEMPLATE_DIR = "tools/op_project_templates/ascendc/customize"  # inside the toolkit
DEFAULT_TOOLKIT = "/usr/local/Ascend/ascend-toolkit/latest"  # 8.x; newer installs: /usr/local/Ascend/cann


def cmakelists(project: OperatorProject) -> str:
    """Top-level CMakeLists.txt of the msopgen `customize` flow.

    The template's cmake/ and scripts/ (opbuild, add_kernels_compile, packaging) come from the
    toolkit the project is built with, copied at configure time as msopgen copies them at project
    creation, so they always match that toolkit's op build.
    """
    return f"""# {BANNER}
cmake_minimum_required(VERSION 3.16.0)
project(opp)

# Where the toolkit is: -DASCEND_CANN_PACKAGE_PATH, else the environment of set_env.sh.
if(NOT DEFINED ASCEND_CANN_PACKAGE_PATH OR NOT EXISTS "${{ASCEND_CANN_PACKAGE_PATH}}/include")
    foreach(candidate "$ENV{{ASCEND_CANN_PACKAGE_PATH}}" "$ENV{{ASCEND_HOME_PATH}}")
        if(candidate AND EXISTS "${{candidate}}/include")
            set(ASCEND_CANN_PACKAGE_PATH "${{candidate}}" CACHE PATH "CANN toolkit root" FORCE)
            break()
        endif()
    endforeach()
endif()
if(NOT EXISTS "${{ASCEND_CANN_PACKAGE_PATH}}/include")
    message(FATAL_ERROR "CANN toolkit not found: set ASCEND_CANN_PACKAGE_PATH or source set_env.sh "
                        "(ASCEND_HOME_PATH); '${{ASCEND_CANN_PACKAGE_PATH}}' has no include/")
endif()
set(OP_PROJECT_TEMPLATE "${{ASCEND_CANN_PACKAGE_PATH}}/{TEMPLATE_DIR}")
if(NOT EXISTS "${{CMAKE_CURRENT_SOURCE_DIR}}/cmake/func.cmake")
    if(NOT EXISTS "${{OP_PROJECT_TEMPLATE}}/cmake/func.cmake")
        message(FATAL_ERROR "the toolkit at ${{ASCEND_CANN_PACKAGE_PATH}} has no custom-operator "
                            "project template ({TEMPLATE_DIR})")
    endif()
    file(COPY "${{OP_PROJECT_TEMPLATE}}/cmake" "${{OP_PROJECT_TEMPLATE}}/scripts"
         DESTINATION "${{CMAKE_CURRENT_SOURCE_DIR}}")
endif()

include(cmake/config.cmake)
include(cmake/func.cmake)
include(cmake/intf.cmake)
# CMAKE_COMPILE builds host tools; with ENABLE_CROSS_COMPILE the op_host libraries are built by
# CMAKE_CROSS_PLATFORM_COMPILER for the other CPU (x86_64 <-> aarch64), linking the toolkit's
# devlib for it (or CMAKE_CROSS_LIBRARY_PATH), as the op build's cmake/ expects.
set(CMAKE_COMPILE ${{CMAKE_CXX_COMPILER}})
if(ENABLE_CROSS_COMPILE)
    set(HOST_PLATFORM ${{CMAKE_SYSTEM_PROCESSOR}})
    if(HOST_PLATFORM STREQUAL x86_64)
        set(CROSS_COMPILE_PLATFORM aarch64)
    else()
        set(CROSS_COMPILE_PLATFORM x86_64)
    endif()
    if(CMAKE_CROSS_LIBRARY_PATH)
        set(CMAKE_COMPILE_COMPILER_LIBRARY ${{CMAKE_CROSS_LIBRARY_PATH}})
        set(CMAKE_COMPILE_RUNTIME_LIBRARY ${{CMAKE_CROSS_LIBRARY_PATH}})
    else()
        set(CROSS_DEVLIB ${{ASCEND_CANN_PACKAGE_PATH}}/${{HOST_PLATFORM}}-linux/devlib)
        set(CMAKE_COMPILE_COMPILER_LIBRARY ${{CROSS_DEVLIB}}/linux/${{CROSS_COMPILE_PLATFORM}}/)
        set(CMAKE_COMPILE_RUNTIME_LIBRARY ${{CROSS_DEVLIB}}/${{CROSS_COMPILE_PLATFORM}}/)
    endif()
    set(CMAKE_SYSTEM_PROCESSOR ${{CROSS_COMPILE_PLATFORM}})
    set(CMAKE_CXX_COMPILER ${{CMAKE_CROSS_PLATFORM_COMPILER}})
endif()

add_subdirectory(op_host)
add_subdirectory(op_kernel)

# install.sh and upgrade.sh of the package, with this project's vendor name
add_custom_command(OUTPUT ${{CMAKE_BINARY_DIR}}/scripts/install.sh ${{CMAKE_BINARY_DIR}}/scripts/upgrade.sh
    COMMAND mkdir -p ${{CMAKE_BINARY_DIR}}/scripts
    COMMAND cp -r ${{CMAKE_SOURCE_DIR}}/scripts/* ${{CMAKE_BINARY_DIR}}/scripts/
    COMMAND sed -i "s/vendor_name=customize/vendor_name=${{vendor_name}}/g" ${{CMAKE_BINARY_DIR}}/scripts/*
)
add_custom_target(modify_vendor ALL DEPENDS ${{CMAKE_BINARY_DIR}}/scripts/install.sh \
${{CMAKE_BINARY_DIR}}/scripts/upgrade.sh)

get_system_info(SYSTEM_INFO)
add_custom_target(gen_version_info ALL
    COMMAND bash ${{CMAKE_CURRENT_SOURCE_DIR}}/cmake/util/gen_version_info.sh ${{ASCEND_CANN_PACKAGE_PATH}} \
${{CMAKE_CURRENT_BINARY_DIR}}
)

install(DIRECTORY ${{CMAKE_BINARY_DIR}}/scripts/ DESTINATION . FILE_PERMISSIONS OWNER_EXECUTE OWNER_READ GROUP_READ)
install(FILES ${{CMAKE_CURRENT_BINARY_DIR}}/version.info DESTINATION packages/vendors/${{vendor_name}}/)

# `package` target: the self-extracting custom_opp_<os>_<arch>.run
set(CPACK_PACKAGE_NAME ${{CMAKE_PROJECT_NAME}})
set(CPACK_PACKAGE_DESCRIPTION "{project.op_name} custom operator (ascend-lowering)")
set(CPACK_PACKAGE_DIRECTORY ${{CMAKE_INSTALL_PREFIX}})
set(CPACK_PACKAGE_FILE_NAME "custom_opp_${{SYSTEM_INFO}}.run")
set(CPACK_GENERATOR External)
set(CPACK_CMAKE_GENERATOR "Unix Makefiles")
set(CPACK_EXTERNAL_ENABLE_STAGING TRUE)
set(CPACK_EXTERNAL_PACKAGE_SCRIPT ${{CMAKE_SOURCE_DIR}}/cmake/makeself.cmake)
set(CPACK_EXTERNAL_BUILT_PACKAGES ${{CPACK_PACKAGE_DIRECTORY}}/_CPack_Packages/Linux/External/\
${{CPACK_PACKAGE_FILE_NAME}}/${{CPACK_PACKAGE_FILE_NAME}})
include(CPack)
"""


def cmake_presets(project: OperatorProject) -> str:
    """CMakePresets.json with the cache variables of the template's preset, in its order and with
    its types and values, except the four a project sets: its compute unit, its vendor (one per
    operator: codegen/emit/vendor.py), the 8.x toolkit path and ENABLE_TEST off (the project ships
    no test cases)."""
    cache = {
        "CMAKE_BUILD_TYPE": ("STRING", "Release"),
        "ENABLE_SOURCE_PACKAGE": ("BOOL", "True"),
        "ENABLE_BINARY_PACKAGE": ("BOOL", "True"),
        "ASCEND_COMPUTE_UNIT": ("STRING", project.target.compute_unit),
        "ENABLE_TEST": ("BOOL", "False"),
        "vendor_name": ("STRING", vendor_name(project.op_name)),
        "ASCEND_CANN_PACKAGE_PATH": ("PATH", DEFAULT_TOOLKIT),
        "ASCEND_PYTHON_EXECUTABLE": ("STRING", "python3"),
        "CMAKE_INSTALL_PREFIX": ("PATH", "${sourceDir}/build_out"),
        "ENABLE_CROSS_COMPILE": ("BOOL", "False"),
        "CMAKE_CROSS_PLATFORM_COMPILER": ("PATH", "/usr/bin/aarch64-linux-gnu-g++"),
        "ASCEND_PACK_SHARED_LIBRARY": ("BOOL", "False"),
    }
    preset = {
        "version": 1,
        "cmakeMinimumRequired": {"major": 3, "minor": 19, "patch": 0},
        "configurePresets": [
            {
                "name": "default",
                "displayName": "Default Config",
                "description": f"{project.op_name} for {project.target.compute_unit}",
                "generator": "Unix Makefiles",
                "binaryDir": "${sourceDir}/build_out",
                "cacheVariables": {k: {"type": t, "value": v} for k, (t, v) in cache.items()},
            }
        ],
    }
    return json.dumps(preset, indent=4) + "\n"


def op_host_cmakelists(project: OperatorProject) -> str:
    """op_host/CMakeLists.txt: the op build (aclnn API, op proto, tiling) and its install layout."""
    return f"""# {BANNER}
aux_source_directory(${{CMAKE_CURRENT_SOURCE_DIR}} ops_srcs)

# compiles these sources (-std=c++11) and runs the toolkit's op_build: aclnn_*.h/.cpp, op_proto.*,
# the ops-info .ini and the generated tiling header land in ${{ASCEND_AUTOGEN_PATH}}
opbuild(OPS_SRC ${{ops_srcs}} OUT_DIR ${{ASCEND_AUTOGEN_PATH}})

add_library(cust_op_proto SHARED ${{ops_srcs}} ${{ASCEND_AUTOGEN_PATH}}/op_proto.cc)
target_compile_definitions(cust_op_proto PRIVATE OP_PROTO_LIB)
target_compile_options(cust_op_proto PRIVATE -fvisibility=hidden)
target_link_libraries(cust_op_proto PRIVATE intf_pub exe_graph register tiling_api
    -Wl,--whole-archive rt2_registry -Wl,--no-whole-archive)
set_target_properties(cust_op_proto PROPERTIES OUTPUT_NAME cust_opsproto_rt2.0)

add_library(cust_optiling SHARED ${{ops_srcs}})
target_compile_definitions(cust_optiling PRIVATE OP_TILING_LIB)
target_compile_options(cust_optiling PRIVATE -fvisibility=hidden)
target_link_libraries(cust_optiling PRIVATE nnopbase intf_pub exe_graph register tiling_api
    -Wl,--whole-archive rt2_registry -Wl,--no-whole-archive)
set_target_properties(cust_optiling PROPERTIES OUTPUT_NAME cust_opmaster_rt2.0)

file(GLOB aclnn_src ${{ASCEND_AUTOGEN_PATH}}/aclnn_*.cpp)
file(GLOB aclnn_inc ${{ASCEND_AUTOGEN_PATH}}/aclnn_*.h)
add_library(cust_opapi SHARED ${{aclnn_src}})
target_link_libraries(cust_opapi PRIVATE intf_pub ascendcl nnopbase)

add_custom_target(optiling_compat ALL
    COMMAND ln -sf lib/linux/${{CMAKE_SYSTEM_PROCESSOR}}/$<TARGET_FILE_NAME:cust_optiling>
            ${{CMAKE_CURRENT_BINARY_DIR}}/liboptiling.so)

set(VENDOR_DIR packages/vendors/${{vendor_name}})
install(TARGETS cust_op_proto LIBRARY DESTINATION ${{VENDOR_DIR}}/op_proto/lib/linux/${{CMAKE_SYSTEM_PROCESSOR}})
install(FILES ${{ASCEND_AUTOGEN_PATH}}/op_proto.h DESTINATION ${{VENDOR_DIR}}/op_proto/inc)
install(TARGETS cust_optiling
        LIBRARY DESTINATION ${{VENDOR_DIR}}/op_impl/ai_core/tbe/op_tiling/lib/linux/${{CMAKE_SYSTEM_PROCESSOR}})
install(FILES ${{CMAKE_CURRENT_BINARY_DIR}}/liboptiling.so DESTINATION ${{VENDOR_DIR}}/op_impl/ai_core/tbe/op_tiling)
install(TARGETS cust_opapi LIBRARY DESTINATION ${{VENDOR_DIR}}/op_api/lib)
# which kernels this library's package holds (read by ascend-lowering's npu backend)
install(FILES ${{CMAKE_SOURCE_DIR}}/{STAMP_FILE} DESTINATION ${{VENDOR_DIR}}/op_api/lib
        RENAME {installed_stamp_name(project.file_stem)})
install(FILES ${{aclnn_inc}} DESTINATION ${{VENDOR_DIR}}/op_api/include)
"""


def op_kernel_cmakelists(project: OperatorProject) -> str:
    return f"""# {BANNER}
# Kernel binaries for every compute unit of ASCEND_COMPUTE_UNIT ({project.target.compute_unit}).
if(CMAKE_BUILD_TYPE STREQUAL "Debug")
    add_ops_compile_options(ALL OPTIONS -g -O0)
endif()

add_kernels_compile()
"""


def example_cmakelists(project: OperatorProject) -> str:
    stem = project.file_stem
    return f"""# {BANNER}
# The aclnn example, built against the installed package (run the .run from ../build.sh first).
cmake_minimum_required(VERSION 3.16.0)
project(test_aclnn_{stem} LANGUAGES CXX)

set(ASCEND_CANN_PACKAGE_PATH "$ENV{{ASCEND_HOME_PATH}}" CACHE PATH "CANN toolkit root")
set(ASCEND_OPP_PATH "$ENV{{ASCEND_OPP_PATH}}" CACHE PATH "opp directory the package installed into")
set(VENDOR_DIR ${{ASCEND_OPP_PATH}}/vendors/{vendor_name(project.op_name)})

add_executable(test_aclnn_{stem} test_aclnn_{stem}.cpp)
target_include_directories(test_aclnn_{stem} PRIVATE
    ${{ASCEND_CANN_PACKAGE_PATH}}/include ${{ASCEND_CANN_PACKAGE_PATH}}/include/aclnn ${{VENDOR_DIR}}/op_api/include)
target_link_directories(test_aclnn_{stem} PRIVATE ${{ASCEND_CANN_PACKAGE_PATH}}/lib64 ${{VENDOR_DIR}}/op_api/lib)
target_link_libraries(test_aclnn_{stem} PRIVATE ascendcl nnopbase cust_opapi)
"""


def build_sh(project: OperatorProject) -> str:
    """Find the toolkit (8.x and newer layouts), configure with the preset, build, package."""
    return f"""#!/usr/bin/env bash
# {BANNER}
# Build and package {project.op_name} for {project.target.compute_unit}: build_out/custom_opp_*.run
set -euo pipefail
cd "$(dirname "$0")"

# 8.x: .../ascend-toolkit/set_env.sh exports ASCEND_HOME_PATH=.../ascend-toolkit/latest (no set_env.sh
# inside it); newer installs: /usr/local/Ascend/cann with its own set_env.sh.
toolkit=""
for candidate in "${{ASCEND_CANN_PACKAGE_PATH:-}}" "${{ASCEND_HOME_PATH:-}}" \
                 {DEFAULT_TOOLKIT} /usr/local/Ascend/cann; do
    if [ -n "$candidate" ] && [ -d "$candidate/include" ]; then
        toolkit="$candidate"
        break
    fi
done
if [ -z "$toolkit" ]; then
    echo "build.sh: no CANN toolkit found: source its set_env.sh or set ASCEND_CANN_PACKAGE_PATH" >&2
    exit 1
fi
if [ ! -f "$toolkit/{TEMPLATE_DIR}/cmake/func.cmake" ] && [ ! -f cmake/func.cmake ]; then
    echo "build.sh: $toolkit lacks the custom-operator project template ({TEMPLATE_DIR})" >&2
    exit 1
fi
if ! command -v cmake >/dev/null; then
    echo "build.sh: cmake (>= 3.19 for presets) is not on PATH" >&2
    exit 1
fi

cmake -S . -B build_out --preset=default -DASCEND_CANN_PACKAGE_PATH="$toolkit" "$@"
cmake --build build_out --target binary -j"$(nproc)"
cmake --build build_out --target package -j"$(nproc)"
"""


_CONVERSIONS = r"""static uint16_t FloatToHalf(float f)
{
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t absx = x & 0x7fffffffu;
    if (absx > 0x7f800000u) {
        return static_cast<uint16_t>(sign | 0x7e00u);
    }
    if (absx >= 0x477ff000u) {  // rounds to or beyond 65520: infinity
        return static_cast<uint16_t>(sign | 0x7c00u);
    }
    if (absx < 0x38800000u) {  // subnormal half or zero
        const float scaled = std::fabs(f) * 16777216.0f;  // 2^24: exact, then round to integer
        return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
    }
    const uint32_t mant = absx & 0x7fffffu;
    uint32_t h = ((absx >> 23) - 112u) << 10 | (mant >> 13);
    const uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) {
        ++h;
    }
    return static_cast<uint16_t>(sign | h);
}

static float HalfToFloat(uint16_t h)
{
    const float sign = (h & 0x8000u) ? -1.0f : 1.0f;
    const int exp = (h >> 10) & 0x1f;
    const int mant = h & 0x3ff;
    if (exp == 0x1f) {
        return mant ? std::nanf("") : sign * HUGE_VALF;
    }
    if (exp == 0) {
        return sign * std::ldexp(static_cast<float>(mant), -24);
    }
    return sign * std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
}

static uint16_t FloatToBf16(float f)
{
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return static_cast<uint16_t>((x >> 16) | 0x40u);
    }
    x += 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>(x >> 16);
}

static float Bf16ToFloat(uint16_t b)
{
    const uint32_t x = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}
"""

_FROM_DEVICE = {
    "float32": ("float", "static_cast<double>(d)"),
    "float16": ("uint16_t", "static_cast<double>(HalfToFloat(d))"),
    "bfloat16": ("uint16_t", "static_cast<double>(Bf16ToFloat(d))"),
}
_HOST_IO = r"""// The value a tensor of `type` holds for v (inputs are rounded before the golden sees them).
static double RoundTrip(double v, aclDataType type)
{
    const float f = static_cast<float>(v);
    if (type == ACL_FLOAT16) {
        return static_cast<double>(HalfToFloat(FloatToHalf(f)));
    }
    if (type == ACL_BF16) {
        return static_cast<double>(Bf16ToFloat(FloatToBf16(f)));
    }
    return static_cast<double>(f);
}

struct DeviceTensor {
    void* addr = nullptr;
    aclTensor* tensor = nullptr;
};

static int ToDevice(const std::vector<double>& host, aclDataType type, const std::vector<int64_t>& shape,
                    DeviceTensor& dt)
{
    const size_t width = type == ACL_FLOAT ? 4 : 2;
    std::vector<uint8_t> raw(host.size() * width);
    for (size_t i = 0; i < host.size(); ++i) {
        const float f = static_cast<float>(host[i]);
        if (type == ACL_FLOAT) {
            std::memcpy(&raw[i * 4], &f, 4);
        } else {
            const uint16_t h = type == ACL_FLOAT16 ? FloatToHalf(f) : FloatToBf16(f);
            std::memcpy(&raw[i * 2], &h, 2);
        }
    }
    CHECK_RET(aclrtMalloc(&dt.addr, raw.size(), ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK_RET(aclrtMemcpy(dt.addr, raw.size(), raw.data(), raw.size(), ACL_MEMCPY_HOST_TO_DEVICE));
    std::vector<int64_t> strides(shape.size(), 1);
    for (size_t k = shape.size(); k-- > 1;) {
        strides[k - 1] = strides[k] * shape[k];
    }
    dt.tensor = aclCreateTensor(shape.data(), shape.size(), type, strides.data(), 0, ACL_FORMAT_ND,
                                shape.data(), shape.size(), dt.addr);
    return dt.tensor == nullptr ? 1 : 0;
}
"""
_THRESHOLDS = {"float32": "1.0 / 8192", "float16": "1.0 / 1024", "bfloat16": "1.0 / 128"}


def _attr_arg(kind: str, value: object) -> str:
    if kind == "bool":
        return "true" if value else "false"
    if kind == "float":
        return host_float_literal(float(value))  # type: ignore[arg-type]
    return f"attr_{value}"


def example_cpp(project: OperatorProject) -> str:
    """The aclnn example, for the project's first variant (its dtypes and attribute values)."""
    art = project.variants[0]
    k = art.kernel
    stem = project.file_stem
    iface = interface(k.op_type)
    attrs = call_attributes(k)
    params = list(k.inputs) + list(k.outputs)
    out = k.outputs[0]
    out_tensor = out.name
    dev_t, from_dev = _FROM_DEVICE[k.dtype]
    bcast = [p.name for p in k.inputs if p.broadcast]
    full = f"{{{EXAMPLE_ROWS}, {EXAMPLE_COLS}}}" if bcast else "{static_cast<int64_t>(n)}"
    shapes = {p.name: full if p.kind is Kind.TILE else "{1}" for p in list(k.inputs) + list(k.outputs)}
    index: dict[str, str] = {}
    for m, name in enumerate(bcast):
        column = m % 2 == 0
        shapes[name] = f"{{{EXAMPLE_ROWS}, 1}}" if column else f"{{1, {EXAMPLE_COLS}}}"
        index[name] = f"e / {EXAMPLE_COLS}" if column else f"e % {EXAMPLE_COLS}"
    sizes = {name: EXAMPLE_ROWS if m % 2 == 0 else EXAMPLE_COLS for m, name in enumerate(bcast)}
    lines = [
        f"// {BANNER}",
        f"// aclnn example for {project.op_name}: run variant {art.variant_tag} ({art.variant_label})",
        "// on the device and compare with a CPU golden (the kernel IR in double precision) by the",
        "// CANN precision standard (MERE < T, MARE < 10 T).",
        "#include <cmath>",
        "#include <cstdint>",
        "#include <cstdio>",
        "#include <cstring>",
        "#include <vector>",
        '#include "acl/acl.h"',
        f'#include "aclnn_{stem}.h"',
        "",
        "#define CHECK_RET(expr)                                                 \\",
        "    do {                                                                \\",
        "        const auto ret_ = (expr);                                       \\",
        "        if (ret_ != 0) {                                                \\",
        '            std::printf("%s failed: %d\\n", #expr, static_cast<int>(ret_)); \\',
        "            return 1;                                                   \\",
        "        }                                                               \\",
        "    } while (0)",
        "",
        _CONVERSIONS,
        _HOST_IO,
        golden_function(k, index),
        "",
        "int main()",
        "{",
        f"    const size_t n = {EXAMPLE_ROWS * EXAMPLE_COLS if bcast else EXAMPLE_ELEMENTS};",
        "    uint32_t seed = 12345u;",
        "    auto next = [&seed]() {",
        "        seed = seed * 1664525u + 1013904223u;",
        "        return static_cast<double>(seed >> 8) / 16777216.0 * 4.0 - 2.0;",
        "    };",
    ]
    for p in k.inputs:
        if p.kind is Kind.TILE:
            lines.append(f"    std::vector<double> {p.name}({sizes.get(p.name, 'n')});")
            lines += [
                f"    for (double& v : {p.name}) {{",
                f"        v = RoundTrip(next(), {ACL_TYPES[p.dtype]});",
                "    }",
            ]
        else:
            value = contract(k.op_type).example_scalars.get(p.name, 0.5)
            lines.append(
                f"    std::vector<double> {p.name} = {{RoundTrip({value!r}, {ACL_TYPES[p.dtype]})}};"
            )
    lines.append(f"    std::vector<double> {out.name}(n, 0.0);")
    lines += [
        f"    char attr_{v}[] = \"{v}\";" for a in iface.attributes if a.kind == "string"
        for v in [attrs[a.name]]
    ]
    lines += [
        "",
        "    CHECK_RET(aclInit(nullptr));",
        "    CHECK_RET(aclrtSetDevice(0));",
        "    aclrtStream stream = nullptr;",
        "    CHECK_RET(aclrtCreateStream(&stream));",
    ]
    for p in params:
        lines += [
            f"    DeviceTensor d_{p.name};",
            f"    CHECK_RET(ToDevice({p.name}, {ACL_TYPES[p.dtype]}, {shapes[p.name]}, d_{p.name}));",
        ]
    args = [f"d_{p.name}.tensor" for p in k.inputs]
    args += [f"{_attr_arg(a.kind, attrs[a.name])} /* {a.name} */" for a in iface.attributes]
    args += [f"d_{p.name}.tensor" for p in k.outputs]
    lines += [
        "    uint64_t workspaceSize = 0;",
        "    aclOpExecutor* executor = nullptr;",
        f"    CHECK_RET(aclnn{project.op_name}GetWorkspaceSize({', '.join(args)},",
        "                                                 &workspaceSize, &executor));",
        "    void* workspace = nullptr;",
        "    if (workspaceSize > 0) {",
        "        CHECK_RET(aclrtMalloc(&workspace, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST));",
        "    }",
        f"    CHECK_RET(aclnn{project.op_name}(workspace, workspaceSize, executor, stream));",
        "    CHECK_RET(aclrtSynchronizeStream(stream));",
        "",
        f"    std::vector<{dev_t}> raw(n);",
        f"    CHECK_RET(aclrtMemcpy(raw.data(), n * sizeof({dev_t}), d_{out_tensor}.addr,",
        f"                          n * sizeof({dev_t}), ACL_MEMCPY_DEVICE_TO_HOST));",
        "    std::vector<double> golden(n, 0.0);",
        f"    Golden({', '.join(p.name for p in k.inputs)}, golden);",
        "    double sum = 0.0;",
        "    double worst = 0.0;",
        "    size_t nanMismatch = 0;",
        "    for (size_t i = 0; i < n; ++i) {",
        "        const auto d = raw[i];",
        f"        const double actual = {from_dev};",
        "        if (std::isnan(actual) != std::isnan(golden[i])) {",
        "            ++nanMismatch;",
        "            continue;",
        "        }",
        "        if (std::isnan(actual) || actual == golden[i]) {",
        "            continue;",
        "        }",
        "        const double rel = std::fabs(actual - golden[i]) / (std::fabs(golden[i]) + 1e-7);",
        "        sum += rel;",
        "        worst = rel > worst ? rel : worst;",
        "    }",
        f"    const double threshold = {_THRESHOLDS[k.dtype]};",
        "    const double mere = sum / static_cast<double>(n);",
        "    const bool pass = nanMismatch == 0 && mere < threshold && worst < 10 * threshold;",
        '    std::printf("MERE %.3e MARE %.3e NaN mismatches %zu threshold %.3e: %s\\n", mere, worst,',
        '                nanMismatch, threshold, pass ? "PASS" : "FAIL");',
        "",
    ]
    for p in params:
        lines += [f"    aclDestroyTensor(d_{p.name}.tensor);", f"    aclrtFree(d_{p.name}.addr);"]
    lines += [
        "    if (workspace != nullptr) {",
        "        aclrtFree(workspace);",
        "    }",
        "    aclrtDestroyStream(stream);",
        "    aclrtResetDevice(0);",
        "    aclFinalize();",
        "    return pass ? 0 : 1;",
        "}",
        "",
    ]
    return "\n".join(lines)


_READ_WAYS = ("streamed tile by tile", "one element, read once per launch on the scalar unit",
              "any shape that broadcasts to input 0's, read by a broadcast load")


def _how_read(p: Param) -> str:
    if p.broadcast:
        return _READ_WAYS[2]
    return _READ_WAYS[0] if p.kind is Kind.TILE else _READ_WAYS[1]


def _io_rows(project: OperatorProject) -> list[str]:
    k = project.variants[0].kernel
    iface = interface(k.op_type)
    rows = []
    for p in k.inputs:
        ways = {_how_read(a.kernel.param(p.name)) for a in project.variants}
        how = " or ".join(w for w in _READ_WAYS if w in ways)
        dtypes = ", ".join(sorted({a.kernel.param(p.name).dtype for a in project.variants}))
        rows.append(f"| {p.name} | input | {dtypes} | {how} |")
    for p, name in zip(k.outputs, iface.outputs):
        dtypes = ", ".join(sorted({a.kernel.param(p.name).dtype for a in project.variants}))
        rows.append(f"| {name} | output | {dtypes} | streamed; shape of input 0 |")
    return rows


def _attr_table(project: OperatorProject) -> str:
    attrs = interface(project.op_name).attributes
    if not attrs:
        return "No attributes."
    rows = [f"| {a.name} | {a.kind} | {a.default} | {'yes' if a.cann else 'no (extra)'} | {a.doc} |" for a in attrs]
    return "\n".join(["| attribute | type | default | CANN's op has it | meaning |", "|---|---|---|---|---|", *rows])


def _variant_section(art: KernelArtifact) -> str:
    k, alloc, t = art.kernel, art.allocation, art.target
    shapes = art.sample_shapes(1 << 24)
    elems = math.prod(shapes[k.inputs[0].name]) if shapes else 1 << 24
    plan = art.schedule(elems, shapes)
    row = [list(v) for n, v in (shapes or {}).items() if k.param(n).broadcast][:1]
    sample = f"{elems} elements, the broadcast inputs of shape {row[0]}" if row else "2^24 elements"
    slots = ", ".join(f"{s.name} ({s.position.value}, {s.dtype})" for s in alloc.slots)
    nodes = ", ".join(f"`{safe_text(n)}`" for n in art.nodes[:20])
    more = f" and {len(art.nodes) - 20} more" if len(art.nodes) > 20 else ""
    served = f"Serves the fused nodes {nodes}{more}.\n\n" if art.nodes else ""
    return f"""### {art.variant_tag}: {art.variant_label}

{served}Tiling key {art.key_base} (single buffer) / {art.key_base | 0x100} (double buffer). The kernel IR, one
AscendC vector call per tile instruction (attribute SConsts show one node's value; the kernel
reads each call's from the tiling data):

```
{art.ir_text.rstrip()}
```

* vector instructions per tile: {k.vector_instruction_count()}
* UB bytes per element: {alloc.bytes_per_element(1):g} (single buffer), \
{alloc.bytes_per_element(2):g} (double buffer); slots: {slots}
* for {sample}: block dim {plan.block_dim}, tile {plan.tile_elems} elements, buffer_num {plan.buffer_num}, \
{plan.ub_bytes} of {t.ub_bytes} UB bytes
"""


def _formula(op: str) -> str:
    """The contract's formula with its output names as the operator names them."""
    spec = contract(op)
    text = spec.formula
    for name, emitted in zip(spec.outputs, interface(op).outputs):
        text = text.replace(f"{name} =", f"{emitted} =")
    return text


def readme(project: OperatorProject) -> str:
    t = project.target
    stem = project.file_stem
    op = project.op_name
    vendor = vendor_name(op)
    axes = "; ".join(f"{a.name} ({', '.join(a.values)})" for a in axes_of(op))
    variants = "\n".join(_variant_section(a) for a in project.variants)
    if any(p.broadcast for a in project.variants for p in a.kernel.inputs):
        shapes = ("Format ND, rank <= 8.\nThe output has input 0's shape; an input read by a broadcast load may "
                  "have any shape that\nbroadcasts to it (numpy rules), the other streamed inputs must have its "
                  "number of elements,\nand the tiling function refuses other shapes and logs why.")
    else:
        shapes = ("Format ND, any rank; the streamed inputs must have\nthe same number of elements (no "
                  "broadcasting: the tiling function refuses other shapes and logs why).")
    fused = contract(op).op_type
    if is_cann(op):
        what = (f"AscendC custom operator `{op}` with CANN's ops-nn prototype exactly (name, inputs, outputs,\n"
                f"attributes and dtypes), generated for fused `{fused}` nodes of the lowered model")
        extra = "It has CANN's attributes only."
    else:
        what = (f"AscendC custom operator `{op}`, the project's own (CANN's `{fused}` prototype cannot\n"
                f"express these kernels, and a package must not register CANN's name with another prototype),\n"
                f"generated for fused `{fused}` nodes of the lowered model")
        extra = ("Attributes CANN's operator lacks are optional, and their defaults give CANN's semantics, so "
                 "a\ncall with the defaults gets CANN's result.")
    return f"""# {op}

{BANNER}

{what}, for `{t.name}` (`__NPU_ARCH__` {t.npu_arch}, compute unit
`{t.compute_unit}`: SoCs {", ".join(t.soc_versions)}).

## Formula

```
{_formula(op)}
```

Compute is float32: float16/bfloat16 inputs are cast up exactly and the result is cast down once
with CAST_RINT (round half to even, overflow to inf).

## Interface

| name | role | dtypes | how the kernel reads it |
|---|---|---|---|
{chr(10).join(_io_rows(project))}

{_attr_table(project)}

{extra} {shapes}

## Variants and tiling keys

One operator serves every variant the model needs. The tiling function recomputes the variant
from the call (axes: {axes}; and the dtypes) and sets tiling key
`dtype code | (buffer_num - 1) << 8 | variant code << {VARIANT_SHIFT}` (dtype codes as ops-nn: DT_FLOAT 0,
DT_FLOAT16 1, DT_BF16 27; the variant code numbers the axis values in mixed radix, first axis least
significant). A call whose variant this package lacks fails at tiling time with a logged reason.
Values (sigma, scale, shrink_max, alpha, l1, l2) are read at tiling or run time, never baked in.
Multi-core split in blocks of 64 elements, tiles in multiples of {TILE_ALIGN} elements; the last
tile of a core moves with DataCopyPad; vector calls cover whole 256-byte repeats;
{UB_RESERVE_BYTES} bytes of UB are never planned (the headroom the hand-written ops-nn kernels keep).

{variants}
## Files (the msopgen `customize` project layout)

* `CMakeLists.txt`, `CMakePresets.json` (ASCEND_COMPUTE_UNIT `{t.compute_unit}`, vendor `{vendor}`), `build.sh`
* `op_host/CMakeLists.txt` (op build: aclnn API, op proto, tiling library), `op_host/{stem}_def.cpp`,
  `op_host/{stem}_infershape.cpp`, `op_host/{stem}_tiling.cpp`
* `op_kernel/CMakeLists.txt` (`add_kernels_compile()`), `op_kernel/{stem}.cpp` (entry `{stem}`),
  `op_kernel/{stem}.h` (CopyIn -> Compute -> CopyOut), `op_kernel/{stem}_tiling_data.h`, `op_kernel/{stem}_tiling_key.h`
* `examples/test_aclnn_{stem}.cpp`, `examples/CMakeLists.txt`: two-phase aclnn call and a CPU golden

`cmake/` and `scripts/` are the toolkit's own (`{TEMPLATE_DIR}`), copied in at configure time as
msopgen copies them, so the op build always matches the toolkit that builds the project.

## Build

```
source /usr/local/Ascend/ascend-toolkit/set_env.sh   # 8.x; newer: /usr/local/Ascend/cann/set_env.sh
./build.sh                                           # build_out/custom_opp_<os>_<arch>.run
./build_out/custom_opp_*.run                         # installs vendors/{vendor} under ASCEND_OPP_PATH
cmake -S examples -B examples/build && cmake --build examples/build   # the aclnn example
```

`build.sh` looks for the toolkit in ASCEND_CANN_PACKAGE_PATH, ASCEND_HOME_PATH, {DEFAULT_TOOLKIT}
and /usr/local/Ascend/cann, and says in one line what is missing.

The vendor `{vendor}` is this operator's alone: install.sh merges a package into a vendor
directory of the same name, so every operator `lower` emits installs as a vendor of its own and
keeps its `op_api/lib/libcust_opapi.so` when the others are installed. Installing puts the vendor
first in `vendors/config.ini`'s `load_priority`; a rebuild of this operator installs over it.

## Toolkit compatibility

The kernel calls only APIs that CANN 8.1-class toolkits and newer ones both declare: a compare
against a scalar is `CompareScalar` (8.1 has no `Compares`; newer toolkits keep `CompareScalar`).
Results assume the INF/NaN float overflow mode (`aclrtFloatOverflowMode` default on A2/A3, the only
mode on 950): a float32 result beyond the output dtype's range rounds to inf.

The kernel and tiling sources are compiled and run on the CPU by the generator's tests (its C++
twin of the AscendC API). Given a toolkit tree, its tests also compile op_kernel in the toolkit's
CPU-debug mode and op_host with `-std=c++11` against the toolkit's headers and configure this
cmake against it (checked with CANN 8.1.RC1 for ascend910b and ascend910_93); nothing here has
been compiled for or run on a device.
"""
