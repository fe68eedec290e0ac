"""Execute a kernel IR (codegen/ir.py) tile by tile, with AscendC numerics (runtime/numerics.py).

The interpreter follows a list of tiles exactly as a schedule lays them out: each tile is a GM
range [offset, offset + n) handled by one core, over count = round_up(n, 64) lanes (the IR's
execution model). Runs of back-to-back tiles of equal length go through numpy as one 2-D batch
(one row per tile), so the per-tile meaning (lanes, masks, padding) is kept while Python overhead
stays per batch. Pad lanes start as NaN: nothing computed there may reach GM.

A wrong schedule cannot go unnoticed: a tile outside [0, N), an output element written twice or
never is a KernelExecutionError naming the core and tile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from codegen import ir
from codegen.ir import Kernel, Kind, Op
from codegen.scalar_eval import eval_scalar
from runtime import numerics
from runtime.numerics import NUMPY_DTYPES, NanPolicy

LANE_GRANULE = ir.LANES_PER_REPEAT
_ROWS_BUDGET = 1 << 16  # lanes per numpy batch: large enough to amortise dispatch, cache friendly


class KernelExecutionError(RuntimeError):
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
    values: dict[int, np.float32] = {}
    with np.errstate(all="ignore"):
        for i, ins in enumerate(kernel.instrs):
            if ins.kind is not Kind.SCALAR:
                continue
            a = [values[s] for s in ins.srcs]
            op = ins.op
            if op is Op.SCONST:
                v = np.float32(ins.attr("value"))
            elif op is Op.SINPUT:
                v = np.asarray(inputs[str(ins.attr("name"))]).reshape(-1)[0].astype(np.float32)
            elif op is Op.SNUMEL:
                v = np.float32(np.asarray(inputs[str(ins.attr("name"))]).size)
            elif op in ir.SCALAR_BINARY or op in ir.SCALAR_UNARY:
                v = eval_scalar(op, *a)
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
                and len(run) * round_up(t.length, LANE_GRANULE) < _ROWS_BUDGET):
            run.append(t)
        else:
            out.append([t])
    return out


def _check_cover(tiles: Sequence[Tile], total: int) -> None:
    """Every output element written exactly once, every tile inside GM."""
    for t in tiles:
        if t.length < 0 or t.offset < 0 or t.offset + t.length > total:
            raise KernelExecutionError(
                f"core {t.core} tile {t.index} covers GM [{t.offset}, {t.offset + t.length}) "
                f"outside the {total} elements")
    ordered = sorted((t for t in tiles if t.length), key=lambda t: t.offset)
    pos = 0
    for t in ordered:
        if t.offset > pos:
            raise KernelExecutionError(f"elements [{pos}, {t.offset}) are written by no tile")
        if t.offset < pos:
            raise KernelExecutionError(
                f"core {t.core} tile {t.index} writes elements [{t.offset}, {min(pos, t.offset + t.length)}) "
                "that another tile already wrote")
        pos = t.offset + t.length
    if pos != total:
        raise KernelExecutionError(f"elements [{pos}, {total}) are written by no tile")


def _copy_in(gm: np.ndarray, batch: list[Tile]) -> np.ndarray:
    n, rows = batch[0].length, len(batch)
    start = batch[0].offset
    src = gm[start:start + rows * n].reshape(rows, n)
    count = round_up(n, LANE_GRANULE)
    if count == n:
        return src
    buf = np.empty((rows, count), gm.dtype)
    buf[:, :n] = src
    buf[:, n:] = np.nan
    return buf


def execute(
    kernel: Kernel,
    tiles: Sequence[Tile],
    inputs: Mapping[str, np.ndarray],
    total: int,
    nan_policy: NanPolicy = "propagate",
) -> dict[str, np.ndarray]:
    """Run `kernel` over `tiles` of a launch with `total` output elements.

    `inputs` maps every kernel input name to its GM data: `total` elements for a tile input, one
    element for a scalar input. Returns each output as a flat array of `total` elements.
    """
    ir.verify(kernel)
    gm: dict[str, np.ndarray] = {}
    for p in kernel.inputs:
        arr = np.asarray(inputs[p.name])
        if arr.dtype != NUMPY_DTYPES[p.dtype]:
            raise KernelExecutionError(f"input {p.name} is {arr.dtype}, the kernel wants {p.dtype}")
        want = 1 if p.kind is Kind.SCALAR else total
        if arr.size != want:
            raise KernelExecutionError(f"input {p.name} holds {arr.size} elements, the launch needs {want}")
        gm[p.name] = arr.reshape(-1)
    outs = {p.name: np.empty(total, NUMPY_DTYPES[p.dtype]) for p in kernel.outputs}
    _check_cover(tiles, total)
    scalars = eval_scalars(kernel, inputs)
    last_use = {}
    for i, ins in enumerate(kernel.instrs):
        for s in ins.srcs:
            last_use[s] = i
    with np.errstate(all="ignore"):
        for batch in _batches([t for t in tiles if t.length]):
            _run_batch(kernel, batch, gm, outs, scalars, last_use, nan_policy)
    return outs


def _run_batch(kernel: Kernel, batch: list[Tile], gm: dict[str, np.ndarray],
               outs: dict[str, np.ndarray], scalars: dict[int, np.float32],
               last_use: dict[int, int], nan_policy: NanPolicy) -> None:
    n, rows = batch[0].length, len(batch)
    count = round_up(n, LANE_GRANULE)
    start = batch[0].offset
    vals: dict[int, np.ndarray] = {}

    def v(i: int) -> np.ndarray | np.float32:
        return scalars[i] if kernel.instrs[i].kind is Kind.SCALAR else vals[i]

    for i, ins in enumerate(kernel.instrs):
        op = ins.op
        if ins.kind is Kind.SCALAR:
            continue
        a = [v(s) for s in ins.srcs]
        if op is Op.COPY_IN:
            r = _copy_in(gm[str(ins.attr("name"))], batch)
        elif op is Op.COPY_IN_BRC:
            r = np.broadcast_to(gm[str(ins.attr("name"))][0], (rows, count))
        elif op is Op.COPY_OUT:
            dst = outs[str(ins.attr("name"))][start:start + rows * n].reshape(rows, n)
            dst[...] = a[0][:, :n]
            continue
        elif op is Op.CAST:
            r = numerics.cast(a[0], str(ins.dtype))
        elif op is Op.ADD or op is Op.ADDS:
            r = a[0] + a[1]
        elif op is Op.SUB:
            r = a[0] - a[1]
        elif op is Op.MUL or op is Op.MULS:
            r = a[0] * a[1]
        elif op is Op.DIV:
            r = a[0] / a[1]
        elif op is Op.ABS:
            r = np.abs(a[0])
        elif op is Op.SIGN:
            r = numerics.sign(a[0])
        elif op is Op.MAXS:
            r = numerics.maxs(a[0], a[1], nan_policy)
        elif op is Op.MINS:
            r = numerics.mins(a[0], a[1], nan_policy)
        elif op is Op.COMPARE:
            r = numerics.compare(a[0], a[1], str(ins.attr("mode")))
        elif op is Op.SELECT:
            r = numerics.select(a[0], a[1], a[2])
        elif op is Op.DUPLICATE:
            r = np.full((rows, count), a[0], np.float32)
        else:
            raise KernelExecutionError(f"instruction {i}: no interpreter for {op.value}")
        vals[i] = r
        for s in ins.srcs:
            if last_use.get(s) == i:
                vals.pop(s, None)
