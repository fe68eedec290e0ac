"""Helpers every rule uses: dtype checks, loads with the cast up, the cast down and store."""

from __future__ import annotations

from codegen.errors import CodegenError
from codegen.ir import F32, FLOAT_DTYPES, KernelBuilder
from codegen.nodes import NodeSpec


def fail(spec: NodeSpec, why: str) -> CodegenError:
    return CodegenError(f"node {spec.name!r} ({spec.op_type}): {why}")


def choice(spec: NodeSpec, name: str, choices: tuple[str, ...], default: str | None = None) -> str:
    """A string attribute of the node, one of `choices` (`default` when the node has none)."""
    value = spec.attrs.get(name, default) if default is not None else spec.attrs[name]
    if value not in choices:
        raise fail(spec, f"{name} must be one of {choices}, got {value!r}")
    return str(value)


def common_dtype(spec: NodeSpec, roles: tuple[str, ...]) -> str:
    dtypes = {spec.inputs[r].dtype for r in roles}
    if len(dtypes) != 1:
        raise fail(spec, f"inputs {', '.join(roles)} must share one dtype, got {sorted(dtypes)}")
    (dtype,) = dtypes
    if dtype not in FLOAT_DTYPES:
        raise fail(spec, f"unsupported dtype {dtype}")
    return dtype


def load_f32(b: KernelBuilder, name: str) -> int:
    """CopyIn a streamed input and bring it to float32 (exact for float16/bfloat16)."""
    v = b.copy_in(name)
    return v if b.instrs[v].dtype == F32 else b.cast(v, F32)


def store(b: KernelBuilder, name: str, value: int, dtype: str) -> None:
    """Round to the output dtype (CAST_RINT) unless it is float32, then CopyOut."""
    b.copy_out(name, value if dtype == F32 else b.cast(value, dtype))


def _broadcasts_to(shape: tuple, out: tuple) -> bool:
    """True when `shape` surely broadcasts to `out` (symbolic dims must match by name)."""
    if len(shape) > len(out):
        return False
    pad = (1,) * (len(out) - len(shape)) + tuple(shape)
    return all(d == 1 or (d is not None and d == o) for d, o in zip(pad, out))


def _grows_nothing(shape: tuple, out: tuple) -> bool:
    """True when broadcasting `shape` to `out` repeats no element (the dims it stretches are 1)."""
    pad = (1,) * (len(out) - len(shape)) + tuple(shape)
    return all(d == o or o == 1 for d, o in zip(pad, out))


def shape_kind(spec: NodeSpec, role: str, like: str, kinds: tuple[str, ...]) -> str:
    """How input `role` meets input `like`'s shape (the output's): the first of `kinds` (a
    subsequence of codegen.registry.SHAPE_KINDS) that holds, as the tiling function decides it
    at run time. A symbolic dim the input stretches counts as more than 1."""
    shape, out = spec.inputs[role].shape, spec.inputs[like].shape
    if same_shape(shape, out):
        return "tile"
    if "scalar" in kinds and spec.inputs[role].numel() == 1:
        return "scalar"
    if shape is not None and out is not None and _broadcasts_to(shape, out):
        if _grows_nothing(shape, out):
            return "tile"
        if "broadcast" in kinds:
            return "broadcast"
    allowed = {"tile": f"{like}'s shape {out}", "scalar": "one element",
               "broadcast": f"a shape that broadcasts to {like}'s"}
    raise fail(spec, f"{role} {shape} must have {' or '.join(allowed[k] for k in kinds)}")


def same_shape(a: tuple | None, b: tuple | None) -> bool:
    """True when both shapes are known and equal dim by dim (symbolic names must match)."""
    if a is None or b is None or len(a) != len(b):
        return False
    return all(x is not None and x == y for x, y in zip(a, b))
