"""Project-level files: CMakeLists.txt, build.sh, the aclnn example and README.md."""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegen.emit.cxx import ACL_TYPES, BANNER
from codegen.emit.golden import golden_function
from codegen.ir import Kind, Op
from codegen.names import safe_text
from codegen.schedule import TILE_ALIGN
from lowering.fused_ops import PROXIMAL_GD, SMOOTH_L1_GRAD

if TYPE_CHECKING:
    from codegen.api import KernelArtifact

FORMULAS = {
    SMOOTH_L1_GRAD: (
        "x = predict - label\n"
        "s = x / sigma where |x| < sigma, else sign(x)   (sign(+-0) = 0; NaN in x gives NaN)\n"
        "gradient = scale * norm * dout * s,  norm = 1/numel(predict) for reduction mean, else 1"
    ),
    PROXIMAL_GD: (
        "prox = var - alpha * delta\n"
        "var_out = sign(prox) * max(|prox| - threshold, 0) / divisor   (sign(0) = 0; NaN propagates)\n"
        "threshold, divisor = alpha*l1, 1 + alpha*l2 (raw) | l1, l2 (folded) | l1, 1/l2 (folded_reciprocal)"
    ),
}
EXAMPLE_SCALARS = {"alpha": 0.01, "l1": 0.001, "l2": 0.01, "dout": 0.5}
EXAMPLE_ELEMENTS = 8 * 1024 + 37  # a partial last tile on purpose


def read_scalars(art: KernelArtifact) -> set[str]:
    return {
        str(ins.attr("name")) for ins in art.kernel.instrs if ins.op in (Op.SINPUT, Op.COPY_IN_BRC)
    }


def cmakelists(art: KernelArtifact) -> str:
    stem = art.file_stem
    return f"""# {BANNER}
cmake_minimum_required(VERSION 3.16)
project({stem} LANGUAGES CXX)

set(ASCEND_HOME_PATH "$ENV{{ASCEND_HOME_PATH}}" CACHE PATH "CANN toolkit root")
if(NOT ASCEND_HOME_PATH)
    set(ASCEND_HOME_PATH /usr/local/Ascend/cann)
endif()
set(SOC_VERSION "{art.target.soc}" CACHE STRING "SoC the kernel is built for")
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)

# Device kernel: compiled by the AscendC toolchain's CMake support.
set(ASCENDC_CMAKE_DIR ${{ASCEND_HOME_PATH}}/tools/tikcpp/ascendc_kernel_cmake)
include(${{ASCENDC_CMAKE_DIR}}/ascendc.cmake)
ascendc_library({stem}_kernel STATIC op_kernel/{stem}.cpp)
target_include_directories({stem}_kernel PRIVATE op_kernel)

# Host side: OpDef, InferShape and tiling, loaded by the op framework.
add_library({stem}_host SHARED
    op_host/{stem}_def.cpp
    op_host/{stem}_infershape.cpp
    op_host/{stem}_tiling.cpp)
target_include_directories({stem}_host PRIVATE
    ${{ASCEND_HOME_PATH}}/include
    ${{ASCEND_HOME_PATH}}/include/op_common
    op_kernel)
target_link_directories({stem}_host PRIVATE ${{ASCEND_HOME_PATH}}/lib64)
target_link_libraries({stem}_host PRIVATE register tiling_api platform exe_graph)

# aclnn example: needs the installed custom op package (libcust_opapi.so).
option(BUILD_EXAMPLE "Build examples/test_aclnn_{stem}" OFF)
if(BUILD_EXAMPLE)
    set(CUSTOM_OPP_DIR "$ENV{{ASCEND_CUSTOM_OPP_PATH}}" CACHE PATH "installed vendor dir")
    add_executable(test_aclnn_{stem} examples/test_aclnn_{stem}.cpp)
    target_include_directories(test_aclnn_{stem} PRIVATE
        ${{ASCEND_HOME_PATH}}/include ${{ASCEND_HOME_PATH}}/include/aclnn ${{CUSTOM_OPP_DIR}}/op_api/include)
    target_link_directories(test_aclnn_{stem} PRIVATE
        ${{ASCEND_HOME_PATH}}/lib64 ${{CUSTOM_OPP_DIR}}/op_api/lib)
    target_link_libraries(test_aclnn_{stem} PRIVATE ascendcl nnopbase cust_opapi)
endif()
"""


def build_sh(art: KernelArtifact) -> str:
    return f"""#!/usr/bin/env bash
# {BANNER}
# Build {art.op_name} for {art.target.soc}. Needs the CANN toolkit (ASCEND_HOME_PATH).
set -euo pipefail
cd "$(dirname "$0")"
ASCEND_HOME_PATH="${{ASCEND_HOME_PATH:-/usr/local/Ascend/cann}}"
if [ ! -f "$ASCEND_HOME_PATH/set_env.sh" ]; then
    echo "CANN toolkit not found at $ASCEND_HOME_PATH (set ASCEND_HOME_PATH)" >&2
    exit 1
fi
# shellcheck disable=SC1091
source "$ASCEND_HOME_PATH/set_env.sh"
cmake -S . -B build -DASCEND_HOME_PATH="$ASCEND_HOME_PATH" -DSOC_VERSION={art.target.soc} "$@"
cmake --build build -j"$(nproc)"
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

static int ToDevice(const std::vector<double>& host, aclDataType type, DeviceTensor& dt)
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
    std::vector<int64_t> shape = {static_cast<int64_t>(host.size())};
    std::vector<int64_t> strides = {1};
    dt.tensor = aclCreateTensor(shape.data(), 1, type, strides.data(), 0, ACL_FORMAT_ND,
                                shape.data(), 1, dt.addr);
    return dt.tensor == nullptr ? 1 : 0;
}
"""
_THRESHOLDS = {"float32": "1.0 / 8192", "float16": "1.0 / 1024", "bfloat16": "1.0 / 128"}


def example_cpp(art: KernelArtifact) -> str:
    k = art.kernel
    stem = art.file_stem
    read = read_scalars(art)
    params = list(k.inputs) + list(k.outputs)
    out = k.outputs[0]
    dev_t, from_dev = _FROM_DEVICE[k.dtype]
    lines = [
        f"// {BANNER}",
        f"// aclnn example for {art.op_name}: run it on the device and compare with a CPU golden",
        "// (the kernel IR in double precision) by the CANN precision standard (MERE < T,",
        "// MARE < 10 T). Scalar inputs the kernel does not read were compile-time constants and",
        "// are baked into the kernel; the values passed for them are ignored.",
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
        golden_function(k),
        "",
        "int main()",
        "{",
        f"    const size_t n = {EXAMPLE_ELEMENTS};",
        "    uint32_t seed = 12345u;",
        "    auto next = [&seed]() {",
        "        seed = seed * 1664525u + 1013904223u;",
        "        return static_cast<double>(seed >> 8) / 16777216.0 * 4.0 - 2.0;",
        "    };",
    ]
    for p in k.inputs:
        if p.kind is Kind.TILE:
            lines.append(f"    std::vector<double> {p.name}(n);")
            lines += [
                f"    for (double& v : {p.name}) {{",
                f"        v = RoundTrip(next(), {ACL_TYPES[p.dtype]});",
                "    }",
            ]
        else:
            value = EXAMPLE_SCALARS.get(p.name, 0.5) if p.name in read else 0.0
            note = "" if p.name in read else "  // baked into the kernel: ignored"
            lines.append(
                f"    std::vector<double> {p.name} = {{RoundTrip({value!r}, {ACL_TYPES[p.dtype]})}};{note}"
            )
    lines.append(f"    std::vector<double> {out.name}(n, 0.0);")
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
            f"    CHECK_RET(ToDevice({p.name}, {ACL_TYPES[p.dtype]}, d_{p.name}));",
        ]
    tensor_args = ", ".join(f"d_{p.name}.tensor" for p in params)
    lines += [
        "    uint64_t workspaceSize = 0;",
        "    aclOpExecutor* executor = nullptr;",
        f"    CHECK_RET(aclnn{art.op_name}GetWorkspaceSize({tensor_args}, &workspaceSize, &executor));",
        "    void* workspace = nullptr;",
        "    if (workspaceSize > 0) {",
        "        CHECK_RET(aclrtMalloc(&workspace, workspaceSize, ACL_MEM_MALLOC_HUGE_FIRST));",
        "    }",
        f"    CHECK_RET(aclnn{art.op_name}(workspace, workspaceSize, executor, stream));",
        "    CHECK_RET(aclrtSynchronizeStream(stream));",
        "",
        f"    std::vector<{dev_t}> raw(n);",
        f"    CHECK_RET(aclrtMemcpy(raw.data(), n * sizeof({dev_t}), d_{out.name}.addr,",
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


def readme(art: KernelArtifact) -> str:
    k, alloc, t = art.kernel, art.allocation, art.target
    stem = art.file_stem
    read = read_scalars(art)
    plan = art.schedule(1 << 24)
    rows = []
    for p in k.inputs:
        if p.kind is Kind.TILE:
            how = "streamed tile by tile"
        elif p.name in read:
            how = "one element, read once per launch on the scalar unit"
        else:
            how = "one element; a compile-time constant baked into the kernel (ignored at run time)"
        rows.append(f"| {p.name} | input | {p.dtype} | {how} |")
    rows += [
        f"| {p.name} | output | {p.dtype} | streamed; shape of the first input |" for p in k.outputs
    ]
    nodes = ", ".join(f"`{safe_text(n)}`" for n in art.nodes[:20])
    more = f" and {len(art.nodes) - 20} more" if len(art.nodes) > 20 else ""
    slots = ", ".join(f"{s.name} ({s.position.value}, {s.dtype})" for s in alloc.slots)
    return f"""# {art.op_name}

{BANNER}

Custom AscendC operator generated for the fused `{k.op_type}` nodes {nodes}{more}
of the lowered model, for `{t.name}` (`__NPU_ARCH__` {t.npu_arch}, AddConfig `{t.soc}`), dtype `{k.dtype}`.

## Formula

```
{FORMULAS.get(k.op_type, k.op_type)}
```

Compute is float32: float16/bfloat16 inputs are cast up exactly and the result is cast down once
with CAST_RINT (round half to even, overflow to inf). This kernel is specialised: attributes and
constant scalars are baked in (see the IR below); a node with other constants gets another kernel.

## Inputs and outputs

| name | role | dtype | how the kernel reads it |
|---|---|---|---|
{chr(10).join(rows)}

Format ND, any rank; the streamed inputs must have the same number of elements (up to 2^62).

## Kernel

The kernel IR, one AscendC vector call per tile instruction (`op_kernel/{stem}.h` repeats each
line as a comment above its call):

```
{art.ir_text.rstrip()}
```

* vector instructions per tile: {k.vector_instruction_count()}
* UB bytes per element: {alloc.bytes_per_element(1):g} (single buffer), {alloc.bytes_per_element(2):g} (double buffer); slots: {slots}
* tiling key = dtype code | (buffer_num - 1) << 8; the host picks double buffering when a core has
  more than one double-buffered tile of work
* multi-core split in blocks of 64 elements, tiles in multiples of {TILE_ALIGN} elements; the last tile of a
  core moves with DataCopyPad; vector calls cover whole 256-byte repeats
* for 2^24 elements: block dim {plan.block_dim}, tile {plan.tile_elems} elements, buffer_num {plan.buffer_num}, {plan.ub_bytes} of {t.ub_bytes} UB bytes

## Files

* `op_host/{stem}_def.cpp`, `op_host/{stem}_infershape.cpp`, `op_host/{stem}_tiling.cpp`
* `op_kernel/{stem}.cpp` (entry `{stem}`), `op_kernel/{stem}.h` (CopyIn -> Compute -> CopyOut),
  `op_kernel/{stem}_tiling_data.h`, `op_kernel/{stem}_tiling_key.h`
* `examples/test_aclnn_{stem}.cpp`: two-phase aclnn call and a CPU golden

## Build

```
export ASCEND_HOME_PATH=/usr/local/Ascend/cann   # your CANN toolkit
./build.sh                                        # kernel library and host library
./build.sh -DBUILD_EXAMPLE=ON                     # also the aclnn example (needs the installed op)
```

Not built against a real toolkit by the generator; the kernel sources are compiled and run on the
CPU by the project's twin tests.
"""
