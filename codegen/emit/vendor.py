"""The vendor name of an emitted operator project: the directory its package installs as.

A custom-op package installs under `<opp>/vendors/<vendor_name>/` and its install.sh merges into
a vendor directory that is already there (`cp -rf`), so two packages of one vendor name overwrite
each other's `op_api/lib/libcust_opapi.so`, op proto and tiling libraries: the operator installed
first loses its aclnn API. Each operator project therefore has a vendor of its own, derived from
its op name alone (the same operator always installs over its previous build):

    ascend_lowering__<file_stem>__op        e.g. ascend_lowering__smooth_l1_loss_grad_v2__op

Why this shape (CANN's rules for a vendor name):
* The op build installs the kernels' Python package as `op_impl/ai_core/tbe/<vendor>_impl`, so the
  name is a Python identifier: lowercase letters, digits and `_`, starting with a letter.
* install.sh puts its vendor first in `vendors/config.ini`'s `load_priority` after deleting the
  name from the line; some template versions delete it as a plain substring (`s/<vendor>//g`),
  others as a word (`s/\\<<vendor>\\>//g`). So no vendor name may occur inside another one.
  A stem has no `__` and neither starts nor ends with `_`, so each name holds `__` exactly twice,
  right after the prefix and right before `op`; a name occurring inside another would have to
  line up both, which makes the two equal. The plain `ascend_lowering_<stem>` lacks this:
  `ascend_lowering_apply_proximal_gradient_descent` lies inside the own operator's
  `ascend_lowering_ascend_lowering_apply_proximal_gradient_descent`.
"""

from __future__ import annotations

import re

from codegen.errors import CodegenError
from codegen.names import snake_case

VENDOR_PREFIX = "ascend_lowering__"
VENDOR_SUFFIX = "__op"
_STEM = re.compile(r"^[a-z0-9]+(?:_[a-z0-9]+)*$")


def vendor_name(op_name: str) -> str:
    """The vendor directory an operator's package installs as (see the module docstring)."""
    stem = snake_case(op_name)
    if not _STEM.match(stem):
        raise CodegenError(f"operator {op_name!r}: its file stem {stem!r} is not lowercase words joined by single "
                           "underscores, so it makes no vendor name")
    return f"{VENDOR_PREFIX}{stem}{VENDOR_SUFFIX}"
