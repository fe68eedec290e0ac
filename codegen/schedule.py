"""Scheduler: a launch plan for one kernel, one target and one element count, plus its checker.

The plan (a plain, frozen dataclass) is what the emitted tiling function computes on the host
and what the CPU backend follows:

* Multi-core split: `block_factor` = ceil(N / cores) rounded up to CORE_ALIGN elements (whole
  32-byte blocks for every dtype); `block_dim` = ceil(N / block_factor) cores run; core c owns
  elements [c * block_factor, min((c + 1) * block_factor, N)).
* UB tile: every queue slot is allocated `buffer_num` times, scratch once, plus fixed scratch
  (Sign's temp buffer, the Select temp space the target needs); UB_RESERVE_BYTES of the
  target's UB are never planned, as the hand-written kernels keep 8 KiB spare. The largest tile that fits,
  in multiples of TILE_ALIGN elements, bounds the tile; a core's range is then cut into
  ceil(range / max_tile) tiles of equal size rounded up to TILE_ALIGN, so only a core's last
  tile is partial. TILE_ALIGN makes every buffer, including a Compare mask (1 bit per
  element), whole 32-byte blocks, and every full tile whole 256-byte repeats.
* Double buffering (buffer_num = 2) when a core has more than one double-buffered tile of work,
  i.e. when there is a next tile to load while this one computes.
* Tail: the last tile of a core moves `n` elements with DataCopyPad (exact byte length) and
  computes over compute_count(n) lanes, n rounded up to whole 256-byte float32 repeats.
* Broadcast inputs (codegen/broadcast.py): the host reduces each one's shape against the output's
  to a layout; its period table, the shared iota and offsets and its window are more UB buffers
  (BufferPlan rows like the kernel's slots), so the tile shrinks by what they cost; a window
  grows with the tile, so the largest tile is found by stepping down TILE_ALIGN elements at a
  time until every buffer fits. A period table that leaves no room for one tile is refused.
* Tiling key: dtype code | (buffer_num - 1) << 8 | variant code << 9: the ops-nn
  ApplyProximalGradientDescent encoding (DT_FLOAT 0, DT_FLOAT16 1, DT_BF16 27) and the kernel's
  variant (codegen/variants.py; 0 for a kernel built without one).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from codegen.broadcast import MAX_GATHER_TILE, OFFSET_BYTES, BroadcastError, BroadcastLayout, layout
from codegen.buffers import Allocation, Position
from codegen.errors import CodegenError
from codegen.ir import DTYPE_BYTES, LANES_PER_REPEAT, Kernel, Op
from codegen.targets import UB_BLOCK_BYTES, Target
from codegen.variants import variant_code

CORE_ALIGN = LANES_PER_REPEAT  # 64 elements: 256 B of float32, 128 B of float16
TILE_ALIGN = 256  # elements: a mask of 256 bits is one 32-byte block
UB_RESERVE_BYTES = 8192  # UB left unplanned, as the hand-written ops-nn kernels keep (pipe control)
SIGN_TMP_BYTES = 3 * 256  # AscendC GetSignMaxMinTmpSize minimum (3 x one 256-byte repeat)
DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 27}
VARIANT_SHIFT = 9
MAX_ELEMENTS = 2**62  # int64 offsets on the device


class PlanError(CodegenError):
    """A plan that breaks a hardware rule (the message says which)."""


@dataclass(frozen=True)
class BufferPlan:
    """One InitBuffer call: `count` buffers of `bytes` each (count = buffer_num for queues)."""

    name: str
    position: Position
    dtype: str
    count: int
    bytes: int


@dataclass(frozen=True)
class BroadcastPlan:
    """How one broadcast input is read: its layout and its table and window lengths (elements)."""

    name: str
    dtype: str
    layout: BroadcastLayout
    table_elems: int
    window_elems: int


@dataclass(frozen=True)
class Plan:
    """How one launch runs. All counts are elements unless the name says bytes.

    Cores: core c in [0, block_dim) owns [c * block_factor, min((c+1) * block_factor, N)).
    Tiles: a core's range is cut into tiles of tile_elems elements, the last one partial.
    """

    target: str
    dtype: str
    num_elements: int
    block_dim: int
    block_factor: int
    tile_elems: int
    buffer_num: int
    tiling_key: int
    ub_limit: int  # target UB bytes
    ub_bytes: int  # bytes this plan allocates, fixed scratch included
    fixed_bytes: int  # Sign temp + Select temp space + reserve
    buffers: tuple[BufferPlan, ...]
    broadcasts: tuple[BroadcastPlan, ...] = ()

    def core_range(self, core: int) -> tuple[int, int]:
        """(first element, element count) of a core."""
        if not 0 <= core < self.block_dim:
            raise IndexError(core)
        start = core * self.block_factor
        return start, max(0, min(self.block_factor, self.num_elements - start))

    def tile_count(self, core: int) -> int:
        _, count = self.core_range(core)
        return -(-count // self.tile_elems) if count else 0

    def tile(self, core: int, t: int) -> tuple[int, int]:
        """(GM offset, element count) of tile t of a core."""
        start, count = self.core_range(core)
        off = t * self.tile_elems
        if t < 0 or off >= count:
            raise IndexError(t)
        return start + off, min(self.tile_elems, count - off)

    def tiles(self, core: int) -> Iterator[tuple[int, int]]:
        """(GM offset, element count) of each tile of a core, in order."""
        for t in range(self.tile_count(core)):
            yield self.tile(core, t)

    @staticmethod
    def compute_count(n: int) -> int:
        """Lanes every vector instruction processes for a tile of n elements."""
        return -(-n // LANES_PER_REPEAT) * LANES_PER_REPEAT

    def report(self) -> dict[str, object]:
        return {
            "num_elements": self.num_elements,
            "block_dim": self.block_dim,
            "block_factor": self.block_factor,
            "tile_elems": self.tile_elems,
            "buffer_num": self.buffer_num,
            "tiling_key": self.tiling_key,
            "ub_bytes": self.ub_bytes,
        }


def fixed_bytes(kernel: Kernel, target: Target) -> int:
    """UB that does not scale with the tile: Sign's temp buffer and Select's temp space."""
    ops = {ins.op for ins in kernel.instrs}
    return (SIGN_TMP_BYTES if Op.SIGN in ops else 0) + (
        target.select_scratch_bytes if Op.SELECT in ops else 0
    )


def variant_key_base(kernel: Kernel) -> int:
    """The tiling key of a kernel with single buffering."""
    code = variant_code(kernel.op_type, kernel.variant) if kernel.variant else 0
    return DTYPE_CODES[kernel.dtype] | (code << VARIANT_SHIFT)


def tiling_key(kernel: Kernel, buffer_num: int) -> int:
    return variant_key_base(kernel) | ((buffer_num - 1) << 8)


def _round32(n: int) -> int:
    return -(-n // UB_BLOCK_BYTES) * UB_BLOCK_BYTES


def _buffers(alloc: Allocation, tile: int, buffer_num: int,
             layouts: tuple[tuple[str, str, BroadcastLayout], ...] = ()) -> tuple[BufferPlan, ...]:
    slots = tuple(
        BufferPlan(
            s.name,
            s.position,
            s.dtype,
            1 if s.position is Position.VECCALC else buffer_num,
            s.bytes_for(tile),
        )
        for s in alloc.slots
    )
    layouts = tuple(entry for entry in layouts if entry[2].tabled)
    if not layouts:
        return slots
    offsets = _round32(tile * OFFSET_BYTES)
    shared = (BufferPlan("bcast_iota", Position.VECCALC, "uint32", 1, offsets),
              BufferPlan("bcast_offsets", Position.VECCALC, "uint32", 1, offsets))
    own = tuple(b for name, dtype, lay in layouts for b in (
        BufferPlan(f"table_{name}", Position.VECCALC, "uint32", 1, _round32(lay.table_elems(tile) * OFFSET_BYTES)),
        BufferPlan(f"window_{name}", Position.VECIN, dtype, buffer_num,
                   _round32(lay.window_buffer_elems(tile) * DTYPE_BYTES[dtype]))))
    return slots + shared + own


def _ub_bytes(buffers: tuple[BufferPlan, ...], fixed: int) -> int:
    return fixed + sum(b.count * b.bytes for b in buffers)


def max_tile(alloc: Allocation, budget: int, buffer_num: int,
             layouts: tuple[tuple[str, str, BroadcastLayout], ...] = ()) -> int:
    """Largest multiple of TILE_ALIGN whose buffers fit in budget bytes (0 if none does).

    Integer arithmetic only (bytes per TILE_ALIGN elements; with broadcast inputs, steps of
    TILE_ALIGN down from there), so the emitted C++ tiling function computes the same number.
    """
    per_block = tile_block_bytes(alloc, buffer_num) + broadcast_block_bytes(sum(lay.tabled for _, _, lay in layouts))
    room = max(budget, 0) - sum(_round32(lay.period * OFFSET_BYTES) for _, _, lay in layouts if lay.tabled)
    tile = max(room, 0) // per_block * TILE_ALIGN if per_block else 0
    if any(lay.tabled for _, _, lay in layouts):
        tile = min(tile, MAX_GATHER_TILE)
    while tile > 0 and sum(b.count * b.bytes for b in _buffers(alloc, tile, buffer_num, layouts)) > budget:
        tile -= TILE_ALIGN
    return tile


def broadcast_block_bytes(n_broadcasts: int) -> int:
    """UB bytes TILE_ALIGN tile elements cost in the offset buffers of n broadcast inputs on the
    period-table path: the shared iota and offsets, and each input's table (its windows are
    stepped, see max_tile)."""
    return (2 + n_broadcasts) * OFFSET_BYTES * TILE_ALIGN if n_broadcasts else 0


def broadcast_layouts(kernel: Kernel, shapes: Mapping[str, tuple[int, ...]] | None, budget: int
                      ) -> tuple[tuple[str, str, BroadcastLayout], ...]:
    """(name, dtype, layout) of each broadcast input against input 0's shape (the output's),
    on the period-table path where its table fits `budget` (codegen/broadcast.py)."""
    wanted = [p for p in kernel.inputs if p.broadcast]
    if not wanted:
        return ()
    if shapes is None:
        raise PlanError(f"{kernel.op_type}: a kernel with broadcast inputs needs the input shapes")
    out_shape = tuple(shapes[kernel.inputs[0].name])
    try:
        found = [(p.name, p.dtype, layout(tuple(shapes[p.name]), out_shape)) for p in wanted]
    except BroadcastError as exc:
        raise PlanError(f"{kernel.op_type}: {exc}") from None
    return tuple((name, dtype, replace(lay, tabled=lay.table_fits(budget))) for name, dtype, lay in found)


def tile_block_bytes(alloc: Allocation, buffer_num: int) -> int:
    """UB bytes that TILE_ALIGN elements of tile cost over all buffers (an integer)."""
    return sum(
        s.bytes_for(TILE_ALIGN) * (1 if s.position is Position.VECCALC else buffer_num)
        for s in alloc.slots
    )


def make_plan(kernel: Kernel, alloc: Allocation, target: Target, num_elements: int,
              shapes: Mapping[str, tuple[int, ...]] | None = None) -> Plan:
    """The plan for num_elements output elements; `shapes` (input name -> shape) is needed
    when the kernel has broadcast inputs."""
    if not isinstance(num_elements, int) or not 0 <= num_elements <= MAX_ELEMENTS:
        raise PlanError(f"element count must be an integer in [0, 2^62], got {num_elements!r}")
    fixed = fixed_bytes(kernel, target)
    if num_elements == 0:
        # Nothing to launch: one core that returns at once, no buffers (as ops-nn does).
        return Plan(
            target=target.name,
            dtype=kernel.dtype,
            num_elements=0,
            block_dim=1,
            block_factor=0,
            tile_elems=0,
            buffer_num=1,
            tiling_key=tiling_key(kernel, 1),
            ub_limit=target.ub_bytes,
            ub_bytes=0,
            fixed_bytes=0,
            buffers=(),
        )
    per_core = -(-num_elements // target.aiv_cores)
    block_factor = -(-per_core // CORE_ALIGN) * CORE_ALIGN
    block_dim = -(-num_elements // block_factor)
    budget = target.ub_bytes - UB_RESERVE_BYTES - fixed
    layouts = broadcast_layouts(kernel, shapes, budget)
    single, double = max_tile(alloc, budget, 1, layouts), max_tile(alloc, budget, 2, layouts)
    if single == 0:
        tables = ", ".join(f"{name}'s window of {lay.window_elems(TILE_ALIGN)} elements" for name, _, lay in layouts)
        raise PlanError(
            f"{kernel.op_type} {kernel.dtype} needs more UB than {target.name} has for one tile"
            + (f" (broadcast: {tables})" if tables else "")
        )
    buffer_num = 2 if double and block_factor > double else 1
    limit = double if buffer_num == 2 else single
    n_tiles = -(-block_factor // limit)
    per_tile = -(-block_factor // n_tiles)
    tile = -(-per_tile // TILE_ALIGN) * TILE_ALIGN
    buffers = _buffers(alloc, tile, buffer_num, layouts)
    return Plan(
        target=target.name,
        dtype=kernel.dtype,
        num_elements=num_elements,
        block_dim=block_dim,
        block_factor=block_factor,
        tile_elems=tile,
        buffer_num=buffer_num,
        tiling_key=tiling_key(kernel, buffer_num),
        ub_limit=target.ub_bytes,
        ub_bytes=_ub_bytes(buffers, fixed),
        fixed_bytes=fixed,
        buffers=buffers,
        broadcasts=tuple(BroadcastPlan(name, dtype, lay, lay.table_elems(tile), lay.window_elems(tile))
                         for name, dtype, lay in layouts),
    )


def _plan_layouts(plan: Plan) -> tuple[tuple[str, str, BroadcastLayout], ...]:
    return tuple((b.name, b.dtype, b.layout) for b in plan.broadcasts)


def check_plan(plan: Plan, kernel: Kernel, alloc: Allocation, target: Target) -> None:
    """Prove the plan's hardware rules; raise PlanError naming the first one broken.

    UB bytes used <= the target's UB less the reserve; every buffer whole 32-byte blocks and each full tile
    whole 256-byte repeats; every element in [0, N) covered by exactly one tile (tiles are
    walked core by core, each must start where the previous ended); offsets fit in int64 and a
    tail's DataCopyPad byte length fits its 21-bit field.
    """
    if plan.target != target.name or plan.ub_limit != target.ub_bytes:
        raise PlanError("plan was made for another target")
    if plan.buffer_num not in (1, 2) or plan.tiling_key != tiling_key(kernel, plan.buffer_num):
        raise PlanError("tiling key does not encode dtype, variant and buffer mode")
    if plan.num_elements == 0:
        if plan.block_dim != 1 or plan.buffers or plan.ub_bytes or plan.tile_elems:
            raise PlanError("an empty launch must be one core without buffers")
        return
    if [(b.name, b.dtype) for b in plan.broadcasts] != [(p.name, p.dtype) for p in kernel.inputs if p.broadcast]:
        raise PlanError("plan broadcasts do not match the kernel's broadcast inputs")
    budget = target.ub_bytes - UB_RESERVE_BYTES - plan.fixed_bytes
    for bp in plan.broadcasts:
        if bp.layout.tabled != bp.layout.table_fits(budget):
            raise PlanError(f"broadcast {bp.name}: the period table path is taken exactly where its table fits")
        if (bp.table_elems, bp.window_elems) != (bp.layout.table_elems(plan.tile_elems),
                                                 bp.layout.window_elems(plan.tile_elems)):
            raise PlanError(f"broadcast {bp.name}: table or window does not fit the tile")
    if plan.buffers != _buffers(
        alloc, plan.tile_elems, plan.buffer_num, _plan_layouts(plan)
    ) or plan.ub_bytes != _ub_bytes(plan.buffers, plan.fixed_bytes):
        raise PlanError("plan buffers do not match the kernel's slots")
    if plan.fixed_bytes != fixed_bytes(kernel, target):
        raise PlanError("fixed scratch bytes are wrong")
    if plan.ub_bytes > target.ub_bytes - UB_RESERVE_BYTES:
        raise PlanError(
            f"UB overflow: {plan.ub_bytes} bytes > {target.ub_bytes} - {UB_RESERVE_BYTES} reserved"
        )
    for b in plan.buffers:
        if b.bytes % UB_BLOCK_BYTES:
            raise PlanError(f"buffer {b.name} is {b.bytes} bytes, not whole 32-byte blocks")
    if plan.tile_elems <= 0 or plan.tile_elems % TILE_ALIGN:
        raise PlanError(f"tile of {plan.tile_elems} elements is not a multiple of {TILE_ALIGN}")
    if plan.compute_count(plan.tile_elems) != plan.tile_elems:
        raise PlanError("a full tile does not cover whole 256-byte Compare repeats")
    if plan.block_factor % CORE_ALIGN or not 1 <= plan.block_dim <= target.aiv_cores:
        raise PlanError(f"bad core split: {plan.block_dim} cores x {plan.block_factor}")
    _check_coverage(plan)


def _check_tile(plan: Plan, core: int, t: int, last: int, expect: int) -> int:
    off, n = plan.tile(core, t)
    if off != expect or not 0 < n <= plan.tile_elems:
        raise PlanError(f"core {core} tile {t}: [{off}, +{n}) does not continue at {expect}")
    if n < plan.tile_elems and t != last:
        raise PlanError(f"core {core} tile {t} is partial but not the last tile")
    if n * DTYPE_BYTES[plan.dtype] > 2097151:
        raise PlanError(f"core {core} tile {t}: DataCopyPad length too long")
    if plan.compute_count(n) > plan.tile_elems:
        raise PlanError(f"core {core} tile {t}: compute lanes exceed the buffer")
    return off + n


@functools.lru_cache(maxsize=4096)
def _check_coverage(plan: Plan, walk_limit: int = 4) -> None:
    """Walk every core's tiles; for long cores walk the first and last walk_limit tiles and
    check that the ones between are full, back-to-back tiles (tile(c, t) is affine in t).
    Cached: the walk depends on the plan's numbers only, and a model's kernels differing in
    their constants share them (a plan that fails raises again, exceptions are not cached)."""
    expect = 0
    for core in range(plan.block_dim):
        start, count = plan.core_range(core)
        if start != expect or count <= 0:
            raise PlanError(f"core {core} starts at {start}, expected {expect} (count {count})")
        if start * DTYPE_BYTES[plan.dtype] % UB_BLOCK_BYTES:
            raise PlanError(f"core {core} does not start on a 32-byte block")
        n_tiles = plan.tile_count(core)
        last = n_tiles - 1
        if n_tiles <= 2 * walk_limit:
            for t in range(n_tiles):
                expect = _check_tile(plan, core, t, last, expect)
        else:
            for t in range(walk_limit):
                expect = _check_tile(plan, core, t, last, expect)
            skipped = n_tiles - 2 * walk_limit
            mid_off, mid_n = plan.tile(core, walk_limit + skipped - 1)
            if mid_n != plan.tile_elems or mid_off != expect + (skipped - 1) * plan.tile_elems:
                raise PlanError(f"core {core}: middle tiles are not full and back to back")
            expect += skipped * plan.tile_elems
            for t in range(n_tiles - walk_limit, n_tiles):
                expect = _check_tile(plan, core, t, last, expect)
        if expect != start + count:
            raise PlanError(f"core {core}: tiles end at {expect}, range ends at {start + count}")
    if expect != plan.num_elements or expect >= 2**63:
        raise PlanError(f"tiles cover [0, {expect}), expected [0, {plan.num_elements})")
