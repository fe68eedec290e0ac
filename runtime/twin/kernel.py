"""One kernel artifact on the twin: compile it, compute its tiling, launch it.

The tiling comes from the emitted host tiling function (compiled into the same library) and is
checked against codegen's Plan and the IR's host scalars, so the C++ tiling, the Python
scheduler and the kernel all agree, or the run fails saying where. `plan_tiling` builds the same
tiling from the Plan alone (the scheduler's values), which tests use to feed corrupted plans.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from codegen.api import KernelArtifact
from codegen.broadcast import MAX_RANK
from codegen.emit.kernel_src import broadcast_names, broadcast_slots, host_scalars, scalar_slots
from codegen.ir import Kind
from codegen.op_interface import call_attributes, interface
from codegen.project import OperatorProject, project_of
from codegen.schedule import DTYPE_CODES, Plan
from runtime.backend import BackendError
from runtime.interpreter import eval_scalars
from runtime.numerics import NUMPY_DTYPES
from runtime.twin.build import build
from runtime.twin.library import (
    GM_INPUT,
    GM_OUTPUT,
    GmArg,
    LaunchStats,
    TargetRules,
    TwinLibrary,
)
from runtime.twin.sources import kernel_sources
from runtime.twin.toolchain import Toolchain


@dataclass(frozen=True)
class Tiling:
    """A launch's tiling: the tiling-data fields, then block dim, tiling key and workspace bytes."""

    num_elements: int
    block_factor: int
    tile_elems: int
    scalars: tuple[tuple[int, float], ...]  # (IR value id, float32 value) of each host scalar
    block_dim: int
    tiling_key: int
    workspace: int = 0
    # each broadcast input's tiling entry: rank, dims, strides, period, shift, table, window, input elements
    broadcasts: tuple[tuple[int, ...], ...] = ()

    def with_fields(self, **changes: Any) -> Tiling:  # a value of any field, as dataclasses.replace takes
        return replace(self, **changes)


class BroadcastTiling(ctypes.Structure):
    """The emitted <Op>BroadcastTiling struct (codegen/emit/kernel_src.py tiling_data_h)."""

    _fields_ = [("rank", ctypes.c_int64), ("dims", ctypes.c_int64 * MAX_RANK), ("strides", ctypes.c_int64 * MAX_RANK),
                ("period", ctypes.c_int64), ("shift", ctypes.c_int64), ("tableElems", ctypes.c_int64),
                ("windowElems", ctypes.c_int64), ("inputElems", ctypes.c_int64)]

    def values(self) -> tuple[int, ...]:
        return (self.rank, *self.dims, *self.strides, self.period, self.shift, self.tableElems, self.windowElems,
                self.inputElems)


def _tiling_struct(n_scalars: int, n_broadcasts: int = 0) -> type[ctypes.Structure]:
    """The ctypes layout of the emitted TilingData struct with `n_scalars` float scalars and
    `n_broadcasts` broadcast entries."""

    fields: list[tuple[str, Any]] = [("numElements", ctypes.c_int64), ("blockFactor", ctypes.c_int64),
                                     ("tileElems", ctypes.c_int64), ("scalars", ctypes.c_float * n_scalars)]
    if n_broadcasts:
        fields.append(("broadcasts", BroadcastTiling * n_broadcasts))

    class TilingData(ctypes.Structure):
        _fields_ = fields

    return TilingData


def broadcast_values(plan: Plan) -> tuple[tuple[int, ...], ...]:
    """The tiling entries of the plan's broadcast inputs, as the emitted tiling writes them."""
    out = []
    for b in plan.broadcasts:
        lay = b.layout
        pad = (0,) * (MAX_RANK - lay.rank)
        out.append((lay.rank, *lay.dims, *pad, *lay.strides, *pad, lay.period, lay.shift, b.table_elems,
                    b.window_elems, lay.input_elems))
    return tuple(out)


def _bits(v: float) -> int:
    return int(np.float32(v).view(np.uint32))


def target_rules(art: KernelArtifact) -> TargetRules:
    t = art.target
    return TargetRules(t.ub_bytes, t.select_scratch_bytes, t.npu_arch)


class TwinKernel:
    """A compiled artifact: its tiling struct layout and the loaded library.

    The library holds the operator project of `project` (default: the artifact's variant alone);
    a project of several variants runs `art` when the call's attributes and dtypes select it.
    `library` is that project compiled already (another variant's TwinKernel holds it).
    """

    def __init__(self, art: KernelArtifact, tc: Toolchain | None, project: OperatorProject | None = None,
                 library: TwinLibrary | None = None) -> None:
        self.art = art
        project = project or project_of([art])
        self.project = project
        if not any(v.key_base == art.key_base and v.structure == art.structure for v in project.variants):
            raise BackendError(f"twin: {art.variant_label} is not a variant of the given {project.op_name} project")
        if library is None:
            if tc is None:
                raise BackendError(f"twin: compiling {art.file_stem} needs a toolchain")
            library = TwinLibrary(build(kernel_sources(project), tc, art.file_stem), art.file_stem)
        self.library = library
        self._scalar_ids = host_scalars(art)
        self._n_broadcasts = len(broadcast_names(art))
        self._struct = _tiling_struct(scalar_slots(project), broadcast_slots(project))
        if ctypes.sizeof(self._struct) != self.library.tiling_size:
            raise BackendError(f"twin: {art.file_stem}'s tiling struct is {self.library.tiling_size} bytes in C++, "
                               f"{ctypes.sizeof(self._struct)} in the twin's layout")

    def for_variant(self, art: KernelArtifact) -> TwinKernel:
        """This compiled project running another variant it holds (no compile)."""
        return TwinKernel(art, None, self.project, self.library)

    def _arrays(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        k = self.art.kernel
        out: dict[str, np.ndarray] = {}
        for p in k.inputs:
            if p.name not in inputs:
                raise BackendError(f"twin: {self.art.file_stem} needs input {p.name!r}")
            a = np.ascontiguousarray(inputs[p.name])
            if a.dtype != NUMPY_DTYPES[p.dtype]:
                raise BackendError(f"twin: input {p.name} is {a.dtype}, kernel {self.art.file_stem} takes {p.dtype}")
            out[p.name] = a
        return out

    def host_tiling(self, inputs: Mapping[str, np.ndarray]) -> Tiling:
        """The emitted tiling function's decision for these inputs on the artifact's target."""
        arrays = self._arrays(inputs)
        k = self.art.kernel
        shapes = [tuple(int(d) for d in arrays[p.name].shape) for p in k.inputs]
        dtypes = [DTYPE_CODES[p.dtype] for p in k.inputs]
        values = call_attributes(k)
        attrs = [values[a.name] for a in interface(k.op_type).attributes]
        host = self.library.host_tiling(shapes, dtypes, attrs, self.art.target.aiv_cores, self.art.target.ub_bytes)
        data = self._struct.from_buffer_copy(host.data.ljust(ctypes.sizeof(self._struct), b"\0"))
        scalars = tuple((i, float(data.scalars[n])) for n, i in enumerate(self._scalar_ids))
        broadcasts = tuple(data.broadcasts[n].values() for n in range(self._n_broadcasts)) if data.numElements else ()
        return Tiling(data.numElements, data.blockFactor, data.tileElems, scalars, host.block_dim, host.tiling_key,
                      host.workspace, broadcasts)

    def plan_tiling(self, plan: Plan, inputs: Mapping[str, np.ndarray]) -> Tiling:
        """The tiling codegen's scheduler computes: the Plan plus the IR's host scalars."""
        values = eval_scalars(self.art.kernel, self._arrays(inputs))
        scalars = tuple((i, float(values[i])) for i in self._scalar_ids)
        return Tiling(plan.num_elements, plan.block_factor, plan.tile_elems, scalars, plan.block_dim,
                      plan.tiling_key, broadcasts=broadcast_values(plan))

    def check_host_tiling(self, host: Tiling, planned: Tiling) -> None:
        """BackendError naming the first field where the emitted tiling and the scheduler differ."""
        pairs: list[tuple[str, object, object]] = [("numElements", host.num_elements, planned.num_elements),
                 ("blockFactor", host.block_factor, planned.block_factor),
                 ("tileElems", host.tile_elems, planned.tile_elems),
                 ("block dim", host.block_dim, planned.block_dim),
                 ("tiling key", host.tiling_key, planned.tiling_key)]
        pairs += [(f"host scalar ${i}", _bits(a), _bits(b)) for (i, a), (_, b) in zip(host.scalars, planned.scalars)]
        pairs += [(f"broadcast entry {n}", got, want)
                  for n, (got, want) in enumerate(zip(host.broadcasts, planned.broadcasts))]
        if len(host.broadcasts) != len(planned.broadcasts):
            pairs.append(("broadcast entries", len(host.broadcasts), len(planned.broadcasts)))
        for name, got, want in pairs:
            if got != want:
                raise BackendError(f"twin: the emitted tiling of {self.art.file_stem} computes {name} = {got}, "
                                   f"codegen's scheduler {want}")

    def tiling_bytes(self, tiling: Tiling) -> bytes:
        data = self._struct(tiling.num_elements, tiling.block_factor, tiling.tile_elems)
        for n, (_, v) in enumerate(tiling.scalars):
            data.scalars[n] = v
        for n, values in enumerate(tiling.broadcasts):
            entry = data.broadcasts[n]
            entry.rank, entry.period, entry.shift, entry.tableElems, entry.windowElems, entry.inputElems = (
                values[0], *values[1 + 2 * MAX_RANK:])
            entry.dims[:] = values[1:1 + MAX_RANK]
            entry.strides[:] = values[1 + MAX_RANK:1 + 2 * MAX_RANK]
        return bytes(data)

    def run(self, inputs: Mapping[str, np.ndarray], tiling: Tiling, workers: int = 1,
            out: Mapping[str, np.ndarray] | None = None) -> tuple[dict[str, np.ndarray], LaunchStats]:
        """Launch on `inputs` with `tiling`; returns the flat outputs by name and the GM traffic.

        `out` may give C-contiguous output buffers to write into (a benchmark reuses them).
        """
        k = self.art.kernel
        arrays = self._arrays(inputs)
        n = next(a.size for p, a in zip(k.inputs, arrays.values()) if p.kind is Kind.TILE)
        outs = {p.name: np.empty(n, NUMPY_DTYPES[p.dtype]) for p in k.outputs} if out is None else {
            p.name: out[p.name].reshape(-1) for p in k.outputs}
        for p in k.outputs:
            a = outs[p.name]
            if a.dtype != NUMPY_DTYPES[p.dtype] or a.size != n or not a.flags.c_contiguous:
                raise BackendError(f"twin: output buffer {p.name} must be {n} contiguous {p.dtype} elements")
        args = [GmArg(p.name, arrays[p.name], GM_INPUT) for p in k.inputs]
        args += [GmArg(p.name, outs[p.name], GM_OUTPUT) for p in k.outputs]
        stats = self.library.launch(args, self.tiling_bytes(tiling), tiling.tiling_key, tiling.block_dim,
                                    tiling.workspace, target_rules(self.art), workers)
        return outs, stats
