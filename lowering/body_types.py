"""Types of the formal inputs of If/Loop/Scan bodies, worked out where the exporter left them out.

Exporters often leave the shape of a loop-carried value unknown (tf2onnx's while_loop, jax2onnx's
fori_loop, TorchScript loops), while the value it starts from is typed in the enclosing graph. The
shape is taken from there when it is loop-invariant, which is proved by induction: with every
carried input given its initial value's type, the body's producers (lowering.local_types, the
body's declared outputs left out) give each carried output that same type, so every iteration
sees it. A hypothesis that fails is dropped and the others are checked again without it, until
none fails. A Scan's per-iteration slice has the scanned input's shape without the scan axis;
Loop's iteration number and condition are scalars by the ONNX spec.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import onnx
from onnx import TensorProto

from .local_types import LocalTypes
from .onnx_values import ValueType, attr, is_complete, value_type_of

Lookup = Callable[[str], ValueType | None]


@dataclass
class FormalTypes:
    """What the pass uses for a body's formal inputs (and the carried outputs proved alike)."""

    types: dict[str, ValueType] = field(default_factory=dict)  # formal input or output -> its type
    worked_out: set[str] = field(default_factory=set)  # the names whose type the body does not declare so
    unknown: dict[str, str] = field(default_factory=dict)  # formal input -> why its shape stays unknown


def show(vt: ValueType | None) -> str:
    """A type as reports print it: float32[8,16], float32[?,16]."""
    if vt is None:
        return "unknown"
    elem = onnx.helper.tensor_dtype_to_np_dtype(vt.elem_type).name if vt.elem_type else "?"
    if vt.shape is None:
        return f"{elem} of unknown rank"
    return f"{elem}[{','.join('?' if d is None else str(d) for d in vt.shape)}]"


def _better(candidate: ValueType | None, declared: ValueType | None) -> bool:
    """Whether `candidate` (complete) agrees with what the body declares and says more: a dim the
    body leaves unknown, or names with a symbol of its own where the candidate has a number."""
    if not is_complete(candidate) or candidate is None or candidate.shape is None:
        return False
    if declared is None or declared.shape is None:
        return declared is None or declared.elem_type in (0, candidate.elem_type)
    if declared.elem_type not in (0, candidate.elem_type) or len(declared.shape) != len(candidate.shape):
        return False
    more = False
    for d, c in zip(declared.shape, candidate.shape):
        if d is None or (isinstance(d, str) and isinstance(c, int)):
            more = True
        elif d != c:
            return False
    return more or declared.elem_type == 0


def _same(a: ValueType | None, b: ValueType | None) -> bool:
    return a is not None and b is not None and a.elem_type == b.elem_type and a.shape == b.shape


def _declared(graph: onnx.GraphProto) -> dict[str, ValueType | None]:
    return {vi.name: value_type_of(vi) for vi in list(graph.input) + list(graph.value_info)}


def formal_types(node: onnx.NodeProto, body: onnx.GraphProto, outer: Lookup, opsets: dict[str, int],
                 functions: dict[tuple[str, str], onnx.FunctionProto]) -> FormalTypes:
    """The types of `body`'s formal inputs as node (an If, Loop or Scan of the enclosing graph,
    whose values `outer` types) calls it."""
    out = FormalTypes()
    formals = [vi.name for vi in body.input]
    declared = _declared(body)
    if node.op_type == "Loop":
        fixed = {0: ValueType(TensorProto.INT64, ()), 1: ValueType(TensorProto.BOOL, ())}
        for k, vt in fixed.items():
            if k < len(formals) and not is_complete(declared.get(formals[k])):
                out.types[formals[k]] = vt
                out.worked_out.add(formals[k])
        carried = [(formals[k], node.input[k], body.output[k - 1].name) for k in range(2, len(formals))
                   if k < len(node.input) and k - 1 < len(body.output)]
        slices: list[tuple[str, str, int]] = []
    elif node.op_type == "Scan":
        n_scan = int(attr(node, "num_scan_inputs", 0))
        n_state = len(node.input) - n_scan
        axes = list(attr(node, "scan_input_axes", []) or [0] * n_scan)
        carried = [(formals[k], node.input[k], body.output[k].name) for k in range(min(n_state, len(formals)))]
        slices = [(formals[n_state + j], node.input[n_state + j], int(axes[j]))
                  for j in range(n_scan) if n_state + j < len(formals)]
    else:
        return out
    for formal, source, axis in slices:
        scanned = outer(source)
        if scanned is not None and scanned.shape is not None and -len(scanned.shape) <= axis < len(scanned.shape):
            shape = list(scanned.shape)
            del shape[axis]
            sliced = ValueType(scanned.elem_type, tuple(shape))
            if _better(sliced, declared.get(formal)):
                out.types[formal] = sliced
                out.worked_out.add(formal)
        elif not is_complete(declared.get(formal)):
            out.unknown[formal] = f"the scanned input {source} has no known shape"
    hypotheses: dict[str, ValueType] = {}
    outputs: dict[str, str] = {}
    for formal, source, result in carried:
        mine = declared.get(formal)
        initial = outer(source)
        if initial is not None and _better(initial, mine):
            hypotheses[formal] = initial
            outputs[formal] = result
        elif not is_complete(mine):
            out.unknown[formal] = (f"its initial value {source} has no known shape" if not is_complete(initial)
                                   else f"it is declared {show(mine)}, its initial value {source} {show(initial)}")
    proved = _invariant(body, hypotheses, outputs, declared, outer, opsets, functions, out.unknown)
    for formal, vt in proved.items():
        out.types[formal] = out.types[outputs[formal]] = vt
        out.worked_out.update((formal, outputs[formal]))
    return out


def _invariant(body: onnx.GraphProto, hypotheses: dict[str, ValueType], outputs: dict[str, str],
               declared: dict[str, ValueType | None], outer: Lookup, opsets: dict[str, int],
               functions: dict[tuple[str, str], onnx.FunctionProto], unknown: dict[str, str]) -> dict[str, ValueType]:
    """The hypotheses (carried input -> type) that hold in every iteration: each body output
    `outputs[input]` has the type its input is given, with every hypothesis that holds assumed."""
    if not hypotheses:
        return {}
    producers = {name: n for n in body.node for name in n.output}
    initializers = {t.name: t for t in body.initializer}
    defined = set(producers) | set(initializers) | set(declared)
    results = set(outputs.values())
    holding = dict(hypotheses)
    while holding:
        def lookup(name: str) -> ValueType | None:
            if name in holding:
                return holding[name]
            if name in results and name in producers:
                return None  # what the body says it returns is what is being proved
            if name in declared:
                return declared[name]
            if name in initializers:
                t = initializers[name]
                return ValueType(t.data_type, tuple(t.dims))
            return None if name in defined else outer(name)

        local = LocalTypes(producers, lookup, initializers, opsets, functions)
        failed = {formal: local.get(result) for formal, result in outputs.items()
                  if formal in holding and not _same(local.get(result), holding[formal])}
        if not failed:
            return holding
        for formal, found in failed.items():
            unknown[formal] = (f"its shape is not loop-invariant: it enters as {show(holding[formal])} "
                               f"and leaves as {show(found)}")
            del holding[formal]
    return {}
