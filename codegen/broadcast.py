"""Broadcast loads: how an input whose shape broadcasts to the output's is read tile by tile.

The host (the tiling function) reduces the two shapes to a *layout*: the output dims with the
size-1 dims dropped and neighbours merged where the input walks them as one dim, and the input's
element stride along each (0 where it broadcasts). A row vector [C] against [R, C] becomes dims
(R, C) strides (0, 1); a column [R, 1] becomes (R, C) strides (1, 0); [1, 1] against anything
becomes (N,) stride (0,). Numpy's rules, ranks up to MAX_RANK.

With P = the product of every dim but the outermost (the layout's *period*) and S = the
outermost stride (its *shift*), output element q * P + p reads input element q * S + b(p), so
the source indices of any P + T consecutive output elements starting at a multiple of P are one
table B[k] = b'(k), k < P + T, shifted by q * S. The kernel builds B once per core (scalar unit,
byte offsets), and for a tile at output offset off = q * P + p0 of n <= T elements:

    1. DataCopyPad the input's elements [q * S, q * S + window) from GM into a UB window
       (window = the most any tile can need, clipped at the input's end);
    2. Gather the tile's offsets: offsets[j] = B[p0 + j] (Gather over B with an iota of byte
       offsets and a base of p0 * 4 bytes);
    3. Gather the data: lane j = window[offsets[j]].

A period too long for a table (P * 4 bytes over a quarter of the UB budget: a column [R, 1] of a
long row, say) takes the general path instead: per tile the scalar unit reads each lane's
element from GM and writes it into the tile (GlobalTensor::GetValue, LocalTensor::SetValue),
a scalar loop over the tile's lanes, which is why the period table is the path wherever it fits.

Costs, honest in the plan: B is P + T uint32, the iota and offsets are T uint32 each (shared by
the broadcast inputs on the table path), a tile reads at most ceil((P + T - 1) / P) * S + (last
index of a period) + 1 input elements (the window's DMA), and the window's buffer holds at least T
elements, since Gather's count may not exceed its source's element count; per tile one DMA of
the window and two Gathers, and a tile of at most MAX_GATHER_TILE elements. The general path takes
no UB beyond the tile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from codegen.errors import CodegenError

MAX_RANK = 8
OFFSET_BYTES = 4  # Gather's offsets are uint32 byte offsets
# Level-2 Gather runs count / (256 B / element) repeats in a uint8 on A2/A3 (8.1.RC1's
# inner_kernel_operator_vec_gather_intf.cppm): 255 repeats of 64 uint32 lanes, in whole tiles
MAX_GATHER_TILE = 255 * 64 // 256 * 256


class BroadcastError(CodegenError):
    """Two shapes that do not broadcast the way a broadcast load needs."""


@dataclass(frozen=True)
class BroadcastLayout:
    """A broadcast input against the output: merged output dims and the input's strides."""

    dims: tuple[int, ...]
    strides: tuple[int, ...]
    input_elems: int
    tabled: bool = True  # offsets from the period table (else written per tile: the general path)

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def period(self) -> int:
        return math.prod(self.dims[1:])

    @property
    def shift(self) -> int:
        return self.strides[0]

    @property
    def period_last(self) -> int:
        """The input index of the last element of the first period (the largest in it)."""
        return sum((d - 1) * s for d, s in zip(self.dims[1:], self.strides[1:]))

    def table_elems(self, tile: int) -> int:
        return self.period + tile if self.tabled else 0

    def window_buffer_elems(self, tile: int) -> int:
        """Elements of the window's buffer: the window, and no fewer than a Gather's count."""
        return max(self.window_elems(tile), tile) if self.tabled else 0

    def table_fits(self, budget: int) -> bool:
        """Whether the period table takes at most a quarter of `budget` UB bytes."""
        return -(-self.period * OFFSET_BYTES // 32) * 32 <= max(budget, 0) // 4

    def window_elems(self, tile: int) -> int:
        """Input elements one tile of `tile` elements may need: the most, clipped at the input
        (0 on the general path, which has no window)."""
        if not self.tabled:
            return 0
        periods = (self.period + tile - 1) // self.period
        return min(self.input_elems, periods * self.shift + self.period_last + 1)

    def source_index(self, flat: np.ndarray) -> np.ndarray:
        """The input element each flat output index reads (int64)."""
        flat = np.asarray(flat, np.int64)
        out = np.zeros(flat.shape, np.int64)
        rest = flat
        for dim, stride in zip(reversed(self.dims), reversed(self.strides)):
            out += (rest % dim) * stride
            rest = rest // dim
        return out


def broadcasts_to(in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> bool:
    """True when numpy broadcasts in_shape to exactly out_shape."""
    if len(in_shape) > len(out_shape):
        return False
    pad = (1,) * (len(out_shape) - len(in_shape)) + tuple(in_shape)
    return all(i == o or i == 1 for i, o in zip(pad, out_shape))


def layout(in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> BroadcastLayout:
    """The layout of an input of in_shape read at every element of out_shape (not empty)."""
    if len(in_shape) > MAX_RANK or len(out_shape) > MAX_RANK:
        raise BroadcastError(f"rank over {MAX_RANK}: {list(in_shape)} against {list(out_shape)}")
    if not broadcasts_to(in_shape, out_shape):
        raise BroadcastError(f"shape {list(in_shape)} does not broadcast to {list(out_shape)}")
    pad = (1,) * (len(out_shape) - len(in_shape)) + tuple(in_shape)
    strides = [0] * len(pad)
    step = 1
    for k in range(len(pad) - 1, -1, -1):
        strides[k] = step if pad[k] != 1 else 0
        step *= pad[k]
    dims: list[int] = []
    merged: list[int] = []
    for dim, stride in zip(out_shape, strides):
        if dim == 1:
            continue
        # the outer dim walks the input exactly as the inner one continued would: one dim
        if dims and merged[-1] == stride * dim:
            dims[-1] *= dim
            merged[-1] = stride
            continue
        dims.append(dim)
        merged.append(stride)
    if not dims:
        dims, merged = [1], [0]
    return BroadcastLayout(tuple(dims), tuple(merged), math.prod(in_shape))
