"""The interface every execution backend implements, and the registry that picks one by name.

A backend runs one fused node's kernel on host arrays:

    class MyBackend(Backend):
        name = "twin"
        def run(self, call: KernelCall) -> dict[str, np.ndarray]: ...

`call.spec` is the fused node as codegen sees it (codegen/nodes.py NodeSpec: op type, attributes,
dtype, concrete shapes, compile-time constant scalars); `call.inputs` holds the data by the
contract's input names (contracts/fused_ops.py OP_SPECS; scalars hold one element); `call.target`
names the SoC the kernel is built and scheduled for. `run` returns every contract output by name,
in the node's dtype and the shape of the first input. It raises BackendError when the kernel
cannot run. The shim (runtime/aclnn.py) does all argument checks before a backend sees a call.

Register a new backend by adding its class to runtime/backends BACKENDS (a compiled-C++ "twin" backend would build
the emitted project once per kernel and run it from `run`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from codegen.nodes import NodeSpec
from contracts.errors import ToolError

DEFAULT_TARGET = "ascend950"


class BackendError(ToolError, RuntimeError):
    """A backend cannot be used here, or a kernel failed; the message is one line."""


@dataclass(frozen=True)
class KernelCall:
    spec: NodeSpec
    inputs: Mapping[str, np.ndarray]
    target: str = DEFAULT_TARGET


class Backend(ABC):
    """Runs fused-node kernels; see the module docstring for the contract."""

    name: str = ""

    @abstractmethod
    def run(self, call: KernelCall) -> dict[str, np.ndarray]:
        """Execute the kernel of `call` and return its outputs by contract name."""

