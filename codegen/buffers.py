"""Buffer liveness and reuse: map every tile and mask value of a kernel to a UB slot.

Slots are what the emitted kernel allocates: one VECIN queue per streamed input, one VECOUT
queue per output, and VECCALC scratch buffers (TBuf). A value is placed, in order of preference:

1. in the slot of an operand that dies at this instruction, if the op may run in place
   (asc-devkit "通用说明和约束": a basic vector API's destination may overlap a source 100%,
   never partly; so element-wise ops and Select run in place, while Sign (its doc forbids
   overlap), Cast between widths and Compare (a mask destination) do not);
2. in any slot of the same dtype whose value is dead, queue slots first;
3. in a new VECCALC slot.

The value a CopyOut stores is written straight into that output's VECOUT slot; other values may
borrow the VECOUT slot only while it is not needed, i.e. when they die before (or, for an
in-place op, at) the instruction that produces the stored value. Input queue slots hold their
loaded tile from the start of the compute stage until its last use, then serve as scratch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from codegen.ir import (
    DTYPE_BYTES,
    MASK_DTYPE,
    TILE_BINARY,
    TILE_SCALAR,
    IRError,
    Kernel,
    Kind,
    Op,
)

INPLACE_OPS = TILE_BINARY | TILE_SCALAR | {Op.ABS, Op.SELECT}


class Position(str, Enum):
    VECIN = "VECIN"
    VECOUT = "VECOUT"
    VECCALC = "VECCALC"


@dataclass(frozen=True)
class Slot:
    """One UB buffer (per pipeline stage: a queue slot is allocated buffer_num times)."""

    name: str  # identifier-safe: in_<param>, out_<param>, calc<k>, mask<k>
    position: Position
    dtype: str  # element dtype; MASK_DTYPE for Compare masks (one bit per lane)
    param: str | None = None  # the kernel parameter a queue slot streams

    def bytes_for(self, tile_elems: int) -> int:
        """UB bytes of one buffer of this slot for a tile of tile_elems lanes (32-byte blocks)."""
        raw = (
            -(-tile_elems // 8)
            if self.dtype == MASK_DTYPE
            else tile_elems * DTYPE_BYTES[self.dtype]
        )
        return -(-raw // 32) * 32

    def bytes_per_element(self) -> float:
        return 0.125 if self.dtype == MASK_DTYPE else float(DTYPE_BYTES[self.dtype])


@dataclass(frozen=True)
class Allocation:
    """slots, and for every instruction id the index of its slot (None for scalars, CopyOut)."""

    slots: tuple[Slot, ...]
    value_slot: tuple[int | None, ...]

    def slot_of(self, value: int) -> Slot:
        idx = self.value_slot[value]
        if idx is None:
            raise KeyError(f"value {value} has no UB slot")
        return self.slots[idx]

    def bytes_per_element(self, buffer_num: int) -> float:
        """UB bytes per tile element: queue slots count buffer_num times, scratch once."""
        return sum(
            s.bytes_per_element() * (buffer_num if s.position is not Position.VECCALC else 1)
            for s in self.slots
        )


def _last_uses(k: Kernel) -> dict[int, int]:
    last: dict[int, int] = {}
    for i, ins in enumerate(k.instrs):
        for s in ins.srcs:
            last[s] = i
    return last


def allocate(k: Kernel) -> Allocation:
    """Assign slots (see the module docstring). Raises IRError for a kernel it cannot place."""
    last = _last_uses(k)
    slots: list[Slot] = []
    value_slot: list[int | None] = [None] * len(k.instrs)
    occupant: dict[int, int] = {}  # slot index -> value currently in it
    stored: dict[int, int] = {}  # value stored by a CopyOut -> its VECOUT slot index

    for i, ins in enumerate(k.instrs):
        if ins.op is Op.COPY_IN:
            name = str(ins.attr("name"))
            slots.append(Slot(f"in_{name}", Position.VECIN, str(ins.dtype), name))
            value_slot[i] = len(slots) - 1
            occupant[len(slots) - 1] = i
    for ins in k.instrs:
        if ins.op is Op.COPY_OUT:
            src = ins.srcs[0]
            if k.instrs[src].op in (Op.COPY_IN, Op.COPY_IN_BRC, Op.COPY_IN_BCAST) or src in stored:
                raise IRError(f"CopyOut of value {src} needs a compute step writing its own buffer")
            name = str(ins.attr("name"))
            slots.append(Slot(f"out_{name}", Position.VECOUT, str(k.instrs[src].dtype), name))
            stored[src] = len(slots) - 1
    vecout_deadline = {slot: def_i for def_i, slot in stored.items()}
    n_calc = {"calc": 0, "mask": 0}

    def fits_vecout(slot: int, v: int, i: int) -> bool:
        deadline = vecout_deadline[slot]
        end = last.get(v, i)
        return end < deadline or (end == deadline and k.instrs[deadline].op in INPLACE_OPS)

    def usable(slot: int, v: int, i: int, inplace: bool) -> bool:
        s = slots[slot]
        if s.dtype != k.instrs[v].dtype:
            return False
        prev = occupant.get(slot)
        if prev is not None and not (last.get(prev, -1) < i or (inplace and last.get(prev) == i)):
            return False
        if s.position is Position.VECOUT and v not in stored:
            return fits_vecout(slot, v, i)
        return True

    for i, ins in enumerate(k.instrs):
        if ins.kind not in (Kind.TILE, Kind.MASK) or ins.op is Op.COPY_IN:
            continue
        target: int | None
        if i in stored:
            target = stored[i]
            if not usable(target, i, i, ins.op in INPLACE_OPS):
                raise IRError(f"value {i}: its output buffer is still in use")
        else:
            target = _choose(k, i, ins.op, value_slot, slots, usable)
            if target is None:
                kind = "mask" if ins.kind is Kind.MASK else "calc"
                slots.append(Slot(f"{kind}{n_calc[kind]}", Position.VECCALC, str(ins.dtype)))
                n_calc[kind] += 1
                target = len(slots) - 1
        value_slot[i] = target
        occupant[target] = i
    return Allocation(tuple(slots), tuple(value_slot))


def _choose(
    k: Kernel,
    i: int,
    op: Op,
    value_slot: list[int | None],
    slots: list[Slot],
    usable: Callable[[int, int, int, bool], bool],
) -> int | None:
    if op in INPLACE_OPS:
        for s in k.instrs[i].srcs:
            slot = value_slot[s]
            if slot is not None and usable(slot, i, i, True):
                return slot
    for slot in range(len(slots)):
        if usable(slot, i, i, False):
            return slot
    return None
