"""The twin backend: the emitted AscendC kernel, compiled by g++ against the twin headers.

For each call: codegen lowers and schedules the node (the same artifact the CPU backend uses),
the emitted op_kernel sources and host tiling function are compiled once (runtime/twin/build.py
caches the shared object), the emitted tiling runs for the call's shapes and must agree with
codegen's Plan, then every block runs the kernel. A broken hardware rule, a compile error or a
tiling disagreement is a one-line BackendError.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from codegen.api import KernelArtifact
from codegen.errors import CodegenError
from codegen.project import OperatorProject
from codegen.schedule import Plan
from contracts.fused_ops import OP_SPECS
from runtime.backend import Backend, BackendError, KernelCall
from runtime.backends.cpu import artifact_for
from runtime.twin.kernel import TwinKernel
from runtime.twin.library import LaunchStats
from runtime.twin.toolchain import find_toolchain

_PLAN_CACHE_SIZE = 256


class TwinBackend(Backend):
    """Runs fused nodes through the emitted C++ kernels on the CPU, block by block."""

    name = "twin"

    def __init__(self, workers: int | None = None) -> None:
        self.toolchain = find_toolchain()
        if workers is not None and (not isinstance(workers, int) or workers < 1):
            raise BackendError(f"twin backend: workers must be a positive integer, got {workers!r}")
        self.workers = workers or max(1, os.cpu_count() or 1)
        self._kernels: dict[tuple[str, str], TwinKernel] = {}
        self._plans: dict[tuple, Plan] = {}
        self._lock = threading.Lock()
        self.last_stats: LaunchStats | None = None

    def kernel(self, art: KernelArtifact) -> TwinKernel:
        """The compiled kernel of an artifact (compiled at most once per process and cache)."""
        key = (art.ir_text, art.target.name)
        with self._lock:
            found = self._kernels.get(key)
        if found is None:
            found = TwinKernel(art, self.toolchain)
            with self._lock:
                found = self._kernels.setdefault(key, found)
        return found

    def serve(self, project: OperatorProject) -> None:
        """Compile one operator project holding several variants (one g++ run) and let it serve
        every variant it holds, as the emitted package does: each call's tiling picks the key."""
        first = project.variants[0]
        whole = TwinKernel(first, self.toolchain, project)
        with self._lock:
            for art in project.variants:
                self._kernels.setdefault((art.ir_text, art.target.name),
                                         whole if art is first else whole.for_variant(art))

    def prepare(self, artifacts: Iterable[KernelArtifact], jobs: int | None = None,
                projects: Iterable[OperatorProject] = ()) -> None:
        """Compile many kernels at once (g++ processes in parallel); errors surface here.
        `projects` are compiled whole (serve); an artifact one of them holds needs no compile."""
        whole = list(projects)
        held = {(a.ir_text, a.target.name) for p in whole for a in p.variants}
        arts = [a for a in artifacts if (a.ir_text, a.target.name) not in held]
        with ThreadPoolExecutor(max(1, jobs or self.workers)) as pool:
            served = [pool.submit(self.serve, p) for p in whole]  # the longest compiles first
            alone = [pool.submit(self.kernel, a) for a in arts]
            for done in served:
                done.result()
            for fut in alone:
                fut.result()

    def plan(self, art: KernelArtifact, num_elements: int, node: str,
             shapes: Mapping[str, tuple[int, ...]] | None = None) -> Plan:
        """codegen's checked plan, memoised per kernel, target, size and the shapes of broadcast
        inputs (plans are deterministic)."""
        bcast = () if shapes is None else tuple(sorted(shapes.items()))
        key = (art.ir_text, art.target.name, num_elements, bcast)
        with self._lock:
            found = self._plans.get(key)
        if found is None:
            try:
                found = art.schedule(num_elements, shapes)
            except CodegenError as exc:
                raise BackendError(f"node {node!r}: no plan for {num_elements} elements: {exc}") from None
            with self._lock:
                if len(self._plans) >= _PLAN_CACHE_SIZE:
                    self._plans.clear()
                self._plans[key] = found
        return found

    def launch(self, call: KernelCall, out: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """run(), optionally writing into given output buffers; the outputs come back flat."""
        spec = call.spec
        art = artifact_for(spec, call.target)
        first = np.asarray(call.inputs[OP_SPECS[spec.op_type].inputs[0]])
        shapes = ({p.name: tuple(np.shape(call.inputs[p.name])) for p in art.kernel.inputs}
                  if any(p.broadcast for p in art.kernel.inputs) else None)
        plan = self.plan(art, int(first.size), spec.name, shapes)
        kernel = self.kernel(art)
        host = kernel.host_tiling(call.inputs)
        kernel.check_host_tiling(host, kernel.plan_tiling(plan, call.inputs))
        outs, self.last_stats = kernel.run(call.inputs, host, self.workers, out)
        return outs

    def run(self, call: KernelCall) -> dict[str, np.ndarray]:
        first = np.asarray(call.inputs[OP_SPECS[call.spec.op_type].inputs[0]])
        return {name: arr.reshape(first.shape) for name, arr in self.launch(call).items()}
