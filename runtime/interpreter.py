"""Execute a kernel IR (codegen/ir.py) tile by tile, with AscendC numerics (runtime/numerics.py).

The interpreter follows a list of tiles exactly as a schedule lays them out: each tile is a GM
range [offset, offset + n) handled by one core, over count = round_up(n, 64) lanes (the IR's
execution model). Runs of back-to-back tiles of equal length go through numpy as one 2-D batch
(one row per tile), so the per-tile meaning (lanes, masks, padding) is kept while Python overhead
stays per batch. Pad lanes start as NaN: nothing computed there may reach GM.

With a buffer allocation (codegen/buffers.py) every value lives in its UB slot, as on the device:
an instruction writes its slot and a later read sees whatever the slot holds then, so two live
values given one slot corrupt each other here just as they would on the hardware. With buffer
sizes (from the plan) a tile whose lanes do not fit a slot is an error.

A wrong schedule cannot go unnoticed: a tile outside [0, N), an output element written twice or
never, or a buffer too small for a tile is a KernelExecutionError naming the core and tile. Every
GM access goes through runtime/global_memory.py and is checked against its buffer as the twin
checks the compiled kernel's (rule gm-bounds: a tile reading past the end of `delta`, a scalar
input with no element, a broadcast load outside its input). A
broadcast load (CopyInBcast) reads through its plan the way the kernel does (codegen/broadcast.py):
every element a tile reads must lie in the window the tile loads, and the period table must
reach the tile's last lane, else the plan is wrong and the run fails.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from codegen import ir
from codegen.buffers import Allocation
from codegen.ir import Kernel, Kind, Op
from codegen.scalar_eval import eval_scalar
from codegen.schedule import BroadcastPlan
from contracts.errors import InternalError
from runtime import numerics
from runtime.global_memory import GlobalMemory, GmAccessError
from runtime.numerics import NUMPY_DTYPES, NanPolicy

LANE_GRANULE = ir.LANES_PER_REPEAT
_F32 = np.dtype(np.float32)
# Ops that are one numpy ufunc; they write straight into the value's UB slot (exact aliasing of
# a source, which the allocator allows for these in-place ops, is safe for element-wise ufuncs).
_UFUNCS = {Op.ADD: np.add, Op.ADDS: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply,
           Op.MULS: np.multiply, Op.DIV: np.divide, Op.ABS: np.abs}
_BATCH_LANES = 1 << 16  # lanes per numpy batch: amortises dispatch, keeps slots in cache
_WORKERS = max(1, min(os.cpu_count() or 1, 8))
_MIN_BATCHES_PER_WORKER = 4  # below this a thread costs more than it saves


class KernelExecutionError(InternalError, RuntimeError):
    """The kernel or its schedule did something the hardware would get wrong."""


@dataclass(frozen=True)
class Tile:
    core: int
    index: int  # tile number within its core
    offset: int  # first GM element
    length: int  # elements (n)


def round_up(n: int, granule: int) -> int:
    return -(-n // granule) * granule


def eval_scalars(kernel: Kernel, inputs: Mapping[str, np.ndarray]) -> dict[int, np.float32]:
    """Every scalar value of the kernel, in instruction order (host, const and kernel stage)."""
    gm = GlobalMemory(inputs, {})
    values: dict[int, np.float32] = {}
    with np.errstate(all="ignore"):
        for i, ins in enumerate(kernel.instrs):
            if ins.kind is not Kind.SCALAR:
                continue
            op = ins.op
            v: float | np.float32
            if op is Op.SCONST:
                v = np.float32(cast(float, ins.attr("value")))
            elif op is Op.SINPUT:
                name = str(ins.attr("name"))
                try:
                    v = np.float32(gm.value("GlobalTensor::GetValue", name))
                except GmAccessError as exc:
                    raise KernelExecutionError(f"scalar input {name}: {exc}") from None
            elif op is Op.SNUMEL:
                v = np.float32(np.asarray(inputs[str(ins.attr("name"))]).size)
            elif op in ir.SCALAR_BINARY or op in ir.SCALAR_UNARY:
                # float() of a float32 is exact, and eval_scalar rounds its operands to float32 again
                v = eval_scalar(op, *(float(values[s]) for s in ins.srcs))
            else:
                raise KernelExecutionError(f"instruction {i}: {op.value} is not a scalar op")
            values[i] = np.float32(v)
    return values


def _batches(tiles: Sequence[Tile]) -> list[list[Tile]]:
    """Split tiles (in schedule order) into runs of equal length that sit back to back in GM."""
    out: list[list[Tile]] = []
    for t in tiles:
        run = out[-1] if out else None
        if (run and run[-1].length == t.length and run[-1].offset + t.length == t.offset
                and (len(run) + 1) * round_up(t.length, LANE_GRANULE) <= _BATCH_LANES):
            run.append(t)
        else:
            out.append([t])
    return out


def check_cover(tiles: Sequence[Tile], total: int) -> None:
    """Every output element written exactly once, every tile inside GM."""
    for t in tiles:
        if t.length < 0 or t.offset < 0 or t.offset + t.length > total:
            raise KernelExecutionError(
                f"core {t.core} tile {t.index} covers GM [{t.offset}, {t.offset + t.length}) "
                f"outside the {total} elements")
    pos = 0
    for t in sorted((t for t in tiles if t.length), key=lambda t: t.offset):
        if t.offset > pos:
            raise KernelExecutionError(f"elements [{pos}, {t.offset}) are written by no tile")
        if t.offset < pos:
            raise KernelExecutionError(
                f"core {t.core} tile {t.index} writes elements [{t.offset}, "
                f"{min(pos, t.offset + t.length)}) that another tile already wrote")
        pos = t.offset + t.length
    if pos != total:
        raise KernelExecutionError(f"elements [{pos}, {total}) are written by no tile")


class _Slots:
    """UB storage for one batch shape: one array per slot (or per value without an allocation)."""

    def __init__(self, kernel: Kernel, alloc: Allocation | None, rows: int, count: int) -> None:
        self.kernel = kernel
        self.alloc = alloc
        self.rows, self.count = rows, count
        self.arrays: dict[int, np.ndarray] = {}
        if alloc is not None:
            for idx, slot in enumerate(alloc.slots):
                self.arrays[idx] = self._new(slot.dtype)

    def _new(self, dtype: str) -> np.ndarray:
        if dtype == ir.MASK_DTYPE:
            return np.zeros((self.rows, self.count // 8), np.uint8)
        arr = np.empty((self.rows, self.count), NUMPY_DTYPES[dtype])
        arr.fill(np.nan)
        return arr

    def key(self, value: int) -> int:
        if self.alloc is None:
            return value
        slot = self.alloc.value_slot[value]
        if slot is None:
            raise KernelExecutionError(f"value {value} has no UB slot in the allocation")
        return slot

    def write(self, value: int, result: np.ndarray) -> None:
        key = self.key(value)
        if self.alloc is None:
            self.arrays[key] = result
            return
        dst = self.arrays[key]
        if dst.dtype != result.dtype:
            raise KernelExecutionError(f"value {value} ({result.dtype}) placed in a {dst.dtype} slot")
        if dst is not result:
            dst[...] = result

    def read(self, value: int) -> np.ndarray:
        return self.arrays[self.key(value)]

    def dest(self, value: int, dtype: np.dtype) -> np.ndarray | None:
        """The slot array a ufunc may write `value` into directly (None: allocate a result)."""
        if self.alloc is None:
            return None
        dst = self.arrays[self.key(value)]
        return dst if dst.dtype == dtype else None


def _check_capacity(alloc: Allocation, capacity: Mapping[str, int], tiles: Sequence[Tile]) -> None:
    """Every slot's buffer (bytes from the plan) holds the lanes of every tile."""
    longest = max((t for t in tiles), key=lambda t: t.length, default=None)
    if longest is None:
        return
    lanes = round_up(longest.length, LANE_GRANULE)
    for slot in alloc.slots:
        have = capacity.get(slot.name)
        if have is None:
            raise KernelExecutionError(f"the plan has no buffer for slot {slot.name}")
        need = slot.bytes_for(lanes)
        if need > have:
            raise KernelExecutionError(
                f"core {longest.core} tile {longest.index}: {lanes} lanes need {need} bytes in "
                f"buffer {slot.name}, the plan gives it {have}")


def execute(
    kernel: Kernel,
    tiles: Sequence[Tile],
    inputs: Mapping[str, np.ndarray],
    total: int,
    nan_policy: NanPolicy = "propagate",
    alloc: Allocation | None = None,
    buffer_bytes: Mapping[str, int] | None = None,
    broadcasts: Sequence[BroadcastPlan] = (),
) -> dict[str, np.ndarray]:
    """Run `kernel` over `tiles` of a launch with `total` output elements.

    `inputs` maps every kernel input name to its GM data: `total` elements for a tile input, one
    element for a scalar input, its own elements for a broadcast input, whose plan (layout,
    table and window) `broadcasts` gives. `alloc` places values in UB slots; `buffer_bytes`
    (slot name -> bytes, from the plan) bounds each slot. Returns each output as a flat array
    of `total`.
    """
    ir.verify(kernel)
    inputs_gm: dict[str, np.ndarray] = {}
    bcast = {b.name: b for b in broadcasts}
    for p in kernel.inputs:
        arr = np.asarray(inputs[p.name])
        if arr.dtype != NUMPY_DTYPES[p.dtype]:
            raise KernelExecutionError(f"input {p.name} is {arr.dtype}, the kernel wants {p.dtype}")
        if p.broadcast and total:
            # the plan's layout is the kernel's binding of the input (SetGlobalBuffer)
            if p.name not in bcast:
                raise KernelExecutionError(f"broadcast input {p.name} has no broadcast plan")
            want = bcast[p.name].layout.input_elems
            if arr.size != want:
                raise KernelExecutionError(f"input {p.name} holds {arr.size} elements, its broadcast plan {want}")
        inputs_gm[p.name] = arr
    outs = {p.name: np.empty(total, NUMPY_DTYPES[p.dtype]) for p in kernel.outputs}
    gm = GlobalMemory(inputs_gm, outs)
    check_cover(tiles, total)
    if alloc is not None and buffer_bytes is not None:
        _check_capacity(alloc, buffer_bytes, tiles)
    scalars = eval_scalars(kernel, inputs_gm)
    batches = _batches([t for t in tiles if t.length])
    # Cores are independent: hand contiguous groups of batches to threads (numpy releases the
    # GIL inside its loops), each with its own UB slots, as each AI core has its own UB.
    workers = max(1, min(_WORKERS, len(batches) // _MIN_BATCHES_PER_WORKER))
    groups = [batches[k * len(batches) // workers:(k + 1) * len(batches) // workers] for k in range(workers)]

    def run_group(group: list[list[Tile]]) -> None:
        slots: dict[tuple[int, int], _Slots] = {}
        with np.errstate(all="ignore"):
            for batch in group:
                shape = (len(batch), round_up(batch[0].length, LANE_GRANULE))
                if shape not in slots:
                    slots[shape] = _Slots(kernel, alloc, *shape)
                try:
                    _run_batch(kernel, batch, gm, scalars, slots[shape], nan_policy, bcast)
                except GmAccessError as exc:
                    t = batch[0]
                    raise KernelExecutionError(f"core {t.core} tile {t.index}: {exc}") from None

    if workers == 1:
        run_group(batches)
    else:
        with ThreadPoolExecutor(workers) as pool:
            for done in [pool.submit(run_group, g) for g in groups]:
                done.result()
    return outs


def broadcast_load(b: BroadcastPlan, gm: GlobalMemory, batch: list[Tile], count: int) -> np.ndarray:
    """The lanes [0, n) of each tile of a batch as CopyInBcast loads them (rows, n), checking
    each tile's reads against the window and table the plan gives it."""
    lay, n = b.layout, batch[0].length
    offsets = np.array([t.offset for t in batch], np.int64)
    src = lay.source_index(offsets[:, None] + np.arange(n, dtype=np.int64)[None, :])
    if not lay.tabled:  # the general path reads each lane's element from GM
        return gm.gather("GlobalTensor::GetValue", b.name, src)
    base = offsets // lay.period * lay.shift
    length = np.minimum(b.window_elems, lay.input_elems - base)
    rel = src - base[:, None]
    bad = np.flatnonzero(((rel < 0) | (rel >= length[:, None])).any(axis=1))
    if bad.size:
        t = batch[int(bad[0])]
        raise KernelExecutionError(f"core {t.core} tile {t.index}: broadcast input {b.name} reads outside the "
                                   f"{int(length[bad[0]])} elements of its window at {int(base[bad[0]])}")
    short = np.flatnonzero(offsets % lay.period + count > b.table_elems)
    if short.size:
        t = batch[int(short[0])]
        raise KernelExecutionError(f"core {t.core} tile {t.index}: the period table of {b.name} "
                                   f"({b.table_elems} entries) ends before the tile's last lane")
    return gm.gather("DataCopyPad", b.name, src)


def _run_batch(kernel: Kernel, batch: list[Tile], gm: GlobalMemory, scalars: dict[int, np.float32], ub: _Slots,
               nan_policy: NanPolicy, bcast: Mapping[str, BroadcastPlan]) -> None:
    n, rows = batch[0].length, len(batch)
    count = ub.count
    start = batch[0].offset

    def v(i: int) -> np.ndarray | np.float32:
        return scalars[i] if kernel.instrs[i].kind is Kind.SCALAR else ub.read(i)

    for i, ins in enumerate(kernel.instrs):
        op = ins.op
        if ins.kind is Kind.SCALAR:
            continue
        if op in (Op.COPY_IN, Op.COPY_IN_BCAST):
            name = str(ins.attr("name"))
            src = (broadcast_load(bcast[name], gm, batch, count) if op is Op.COPY_IN_BCAST
                   else gm.load("DataCopy", name, start, rows * n).reshape(rows, n))
            if count == n and ub.alloc is None:
                ub.write(i, src)
                continue
            r = ub.dest(i, src.dtype)
            if r is None:
                r = np.empty((rows, count), src.dtype)
            r[:, :n] = src
            r[:, n:] = np.nan  # DataCopyPad pads the tail; the pad lanes are never stored
            ub.write(i, r)
            continue
        a: list[Any] = [v(s) for s in ins.srcs]  # tiles, masks or scalars, as the verified IR says
        if op is Op.COPY_OUT:
            dst = gm.store("DataCopy", str(ins.attr("name")), start, rows * n).reshape(rows, n)
            dst[...] = a[0][:, :n]
            continue
        if op is Op.COPY_IN_BRC:
            r = np.full((rows, count), gm.value("GlobalTensor::GetValue", str(ins.attr("name"))))
        elif op is Op.CAST:
            r = numerics.cast(a[0], str(ins.dtype))
        elif op in _UFUNCS:
            r = _UFUNCS[op](*a, out=ub.dest(i, _F32))
        elif op is Op.SIGN:
            r = numerics.sign(a[0])
        elif op is Op.MAXS or op is Op.MINS:
            r = numerics.clamp_op(op.value, nan_policy)(a[0], a[1], out=ub.dest(i, _F32))
        elif op is Op.COMPARE:
            r = numerics.compare(a[0], a[1], str(ins.attr("mode")))
        elif op is Op.SELECT:
            r = numerics.select(a[0], a[1], a[2])
        elif op is Op.DUPLICATE:
            r = np.full((rows, count), a[0], np.float32)
        else:
            raise KernelExecutionError(f"instruction {i}: no interpreter for {op.value}")
        ub.write(i, r)
