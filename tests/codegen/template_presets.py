"""The msopgen `customize` template's CMakePresets.json cache variables, as a fact, and the rule
the emitted presets follow against any template.

From CANN 8.1.RC1 (`tools/op_project_templates/ascendc/customize/CMakePresets.json`, public
snapshot leideng/CANN-8.1.RC1): name, type and value of each cache variable, in the file's order.
"""

from __future__ import annotations

from collections.abc import Mapping

TEMPLATE_8_1_RC1: tuple[tuple[str, str, str], ...] = (
    ("CMAKE_BUILD_TYPE", "STRING", "Release"),
    ("ENABLE_SOURCE_PACKAGE", "BOOL", "True"),
    ("ENABLE_BINARY_PACKAGE", "BOOL", "True"),
    ("ASCEND_COMPUTE_UNIT", "STRING", "__ASCNED_COMPUTE_UNIT__"),  # msopgen substitutes it (sic)
    ("ENABLE_TEST", "BOOL", "True"),
    ("vendor_name", "STRING", "customize"),
    ("ASCEND_CANN_PACKAGE_PATH", "PATH", "/usr/local/Ascend/latest"),
    ("ASCEND_PYTHON_EXECUTABLE", "STRING", "python3"),
    ("CMAKE_INSTALL_PREFIX", "PATH", "${sourceDir}/build_out"),
    ("ENABLE_CROSS_COMPILE", "BOOL", "False"),
    ("CMAKE_CROSS_PLATFORM_COMPILER", "PATH", "/usr/bin/aarch64-linux-gnu-g++"),
    ("ASCEND_PACK_SHARED_LIBRARY", "BOOL", "False"),
)

# what a project sets where the template has a placeholder or a default of its own
PROJECT_SET = {"ASCEND_COMPUTE_UNIT", "vendor_name", "ASCEND_CANN_PACKAGE_PATH", "ENABLE_TEST"}


def differences(emitted: Mapping[str, Mapping[str, str]], template: Mapping[str, Mapping[str, str]]) -> list[str]:
    """How emitted cache variables differ from a template's: names and order, types, and values
    outside PROJECT_SET."""
    out = []
    if list(emitted) != list(template):
        out.append(f"variables {list(emitted)} where the template has {list(template)}")
    for name, want in template.items():
        got = emitted.get(name)
        if got is None:
            continue
        if got.get("type") != want.get("type"):
            out.append(f"{name}: type {got.get('type')} where the template has {want.get('type')}")
        if name not in PROJECT_SET and got.get("value") != want.get("value"):
            out.append(f"{name}: value {got.get('value')!r} where the template has {want.get('value')!r}")
    return out


def as_cache(rows: tuple[tuple[str, str, str], ...]) -> dict[str, dict[str, str]]:
    return {name: {"type": t, "value": v} for name, t, v in rows}
