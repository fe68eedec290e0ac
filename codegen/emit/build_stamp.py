"""The build stamp of an emitted operator project: which kernels its package was built from.

The package installs it beside its aclnn library, as `op_api/lib/<file_stem>.build_stamp.json`,
so whoever loads that library (the npu backend) can tell whether it holds the kernels `lower`
generates for a model: the same target, and for each tiling key the same kernel structure.
Attribute values the operator reads at tiling time are not part of a kernel's digest (one variant
serves every sigma or alpha), so the stamp changes only when a rebuild would change the kernels.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from codegen.artifact import KernelArtifact
    from codegen.project import OperatorProject

GENERATOR = "ascend-lowering"
STAMP_FILE = "build_stamp.json"  # in the project; installed as op_api/lib/<file_stem>.build_stamp.json


def installed_stamp_name(file_stem: str) -> str:
    """The stamp's file name beside libcust_opapi.so, named after its operator: each operator
    installs as a vendor of its own (codegen/emit/vendor.py), but a vendor directory holding
    several operators (merged by hand, or from an older lower) still has one stamp each."""
    return f"{file_stem}.{STAMP_FILE}"


def kernel_digest(art: KernelArtifact) -> str:
    """A short digest of one variant's kernel for its target (equal for equal kernels)."""
    text = f"{art.target.name}\n{art.structure}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def build_stamp(project: OperatorProject) -> str:
    """The stamp's JSON text: deterministic, like every emitted file."""
    stamp = {
        "generator": GENERATOR,
        "op": project.op_name,
        "target": project.target.name,
        "kernels": {str(a.key_base): kernel_digest(a) for a in project.variants},
    }
    return json.dumps(stamp, indent=2, sort_keys=True) + "\n"
