"""Inputs for a diff: read from an .npz file or generated from the model's input specs.

Generated inputs are seeded and mix random values with edges: zeros of both signs, +-1, tiny
magnitudes, negatives, and, for every fused node fed straight from graph inputs, values that sit
exactly on its threshold (|predict - label| == sigma; |var| == alpha*l1 with delta == 0).
Large magnitudes go only into inputs a fused node reads (through Cast/Identity at most): fed into
the layers before a fused node they overflow there (exp, matmul), and the inf and NaN that come
out test the network, not the fusion, and drown the diff. inf and NaN appear only when asked for
(`nonfinite=True`), and then in every input.
"""

from __future__ import annotations

import math
import os
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO

import ml_dtypes
import numpy as np
import onnx

from contracts.errors import LoweringError
from contracts.fused_ops import OP_SPECS, ScalarDraw
from lowering.graph import model_constants
from lowering.terminal import printable
from runtime.fused_node import fused_attrs, is_fused
from runtime.precision import HALF_TYPES, rounded_to

Dim = int | str | None

_BF16 = np.dtype(ml_dtypes.bfloat16)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float16), _BF16, np.dtype(np.float64))
# "Large" stays far enough below the dtype's max that predict - label and var - alpha*delta do
# not overflow in the dtype itself: an unfused float16 graph rounds every intermediate to float16.
_LARGE = {"float16": 16384.0, "bfloat16": 1e30, "float32": 1e30, "float64": 1e30}
_EDGE_SHARE = 0.25
_THRESHOLD_SHARE = 0.125
# elements one generated input may hold: values are drawn in float64 (8 bytes each) first
GENERATE_LIMIT = 1 << 28


class InputError(LoweringError):
    """Bad user input for a diff (an option, an input file); one line, exit code 2."""


def check_seed(seed: object) -> int:
    """A seed numpy's generator takes: a non-negative integer."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"--seed {printable(str(seed))}: must be a non-negative integer")
    return seed


@dataclass(frozen=True)
class InputSpec:
    name: str
    dtype: np.dtype
    shape: tuple[Dim, ...] | None  # None: rank unknown


def _np_dtype(elem_type: int, name: str) -> np.dtype:
    if elem_type == onnx.TensorProto.BFLOAT16:
        return _BF16
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        raise InputError(f"input '{printable(name)}' has an unsupported element type {elem_type}") from None


def model_input_specs(model: onnx.ModelProto) -> list[InputSpec]:
    """Graph inputs a caller must feed (inputs that are initializers have a default: skipped)."""
    inits = {t.name for t in model.graph.initializer}
    specs = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if not vi.type.HasField("tensor_type"):
            raise InputError(f"input '{printable(vi.name)}' is not a tensor; only tensor inputs are supported")
        tt = vi.type.tensor_type
        shape: tuple[Dim, ...] | None = None
        if tt.HasField("shape"):
            shape = tuple(
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim
            )
        specs.append(InputSpec(vi.name, _np_dtype(tt.elem_type, vi.name), shape))
    return specs


_DIMS = re.compile(r"^\s*\[?\s*(\d+(\s*[,x]\s*\d+)*)?\s*\]?\s*$")


def parse_shape_options(items: list[str] | None) -> dict[str, tuple[int, ...]]:
    """--shape NAME=DIMS (DIMS like 2,3 or 2x3; empty for a 0-D tensor), repeatable."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items or []:
        name, eq, dims = item.rpartition("=")
        if not eq or not name:
            raise InputError(f"--shape '{printable(item)}': expected NAME=DIMS, for example x=2,3")
        if not _DIMS.match(dims):
            raise InputError(f"--shape '{printable(item)}': DIMS must be non-negative integers like 2,3")
        numbers = re.findall(r"\d+", dims)
        shapes[name] = tuple(int(n) for n in numbers)
    return shapes


def resolve_shapes(
    specs: list[InputSpec], overrides: Mapping[str, tuple[int, ...]]
) -> dict[str, tuple[int, ...]]:
    """Concrete shape of every input: static dims, --shape, and dims named alike (dim_param).

    A symbolic dim bound by one --shape (say n=8 from --shape p=8,5) fills the same name in the
    other inputs, so one --shape per distinct symbol is enough.
    """
    known = {s.name for s in specs}
    for name in overrides:
        if name not in known:
            raise InputError(f"--shape {printable(name)}: the model has no such input "
                             f"(inputs: {printable(', '.join(sorted(known)))})")
    bound: dict[str, int] = {}
    out: dict[str, tuple[int, ...]] = {}
    for s in specs:
        given = overrides.get(s.name)
        if given is None:
            continue
        if s.shape is not None:
            if len(given) != len(s.shape):
                raise InputError(f"--shape {printable(s.name)}: rank {len(given)} "
                                 f"but the model says rank {len(s.shape)}")
            for g, d in zip(given, s.shape):
                if isinstance(d, int) and d != g:
                    raise InputError(f"--shape {printable(s.name)}={_fmt(given)} disagrees with "
                                     f"the static shape {_fmt(s.shape)}")
                if isinstance(d, str) and bound.setdefault(d, g) != g:
                    raise InputError(f"--shape {printable(s.name)}: dim '{printable(d)}' is {g} here "
                                     f"but {bound[d]} elsewhere")
        out[s.name] = given
    unresolved = []
    for s in specs:
        if s.name in out:
            continue
        resolved = None if s.shape is None else _resolved(s.shape, bound)
        if resolved is not None:
            out[s.name] = resolved
        else:
            unresolved.append(s)
    if unresolved:
        listed = ", ".join(f"{printable(s.name)} {'(unknown rank)' if s.shape is None else _fmt(s.shape)}"
                           for s in unresolved)
        raise InputError(f"dynamic input shapes need --shape NAME=DIMS: {listed}")
    for name, shape in out.items():
        if any(d < 0 for d in shape):
            raise InputError(f"input '{printable(name)}' has a negative dimension {_fmt(shape)}")
        if math.prod(shape) > GENERATE_LIMIT:
            raise InputError(f"input '{printable(name)}' {_fmt(shape)} holds {math.prod(shape)} elements, "
                             "more than the "
                             f"{GENERATE_LIMIT} generated inputs may; pass smaller --shape or --inputs FILE.npz")
    return out


def _resolved(shape: tuple[Dim, ...], bound: Mapping[str, int]) -> tuple[int, ...] | None:
    """The shape with each named dim replaced by its bound value; None if a dim is unknown."""
    dims = []
    for d in shape:
        if isinstance(d, str) and d in bound:
            dims.append(bound[d])
        elif isinstance(d, int):
            dims.append(d)
        else:
            return None
    return tuple(dims)


def _fmt(shape: tuple[Dim, ...]) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def _arg(path: str) -> str:
    return f"--inputs {printable(str(path))}"


def _npy_header(fh: IO[bytes]) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of the .npy stream `fh`, reading only its header where the format
    version has a public reader (1.0 and 2.0; numpy writes 3.0 only for unusual field names)."""
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
    else:
        arr = np.lib.format.read_array(fh, allow_pickle=False)
        shape, dtype = arr.shape, arr.dtype
    return tuple(int(d) for d in shape), np.dtype(dtype)


def _unreadable(path: str, exc: BaseException) -> InputError:
    return InputError(f"{_arg(path)}: not a readable .npz file "
                      f"({printable(str(exc).strip() or type(exc).__name__)})")


def npz_headers(path: str) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Shape and dtype of every array in the .npz at `path`, by name, without reading the data;
    InputError when the file is missing, unreadable or not an .npz of plain arrays."""
    if not os.path.exists(path):
        raise InputError(f"{_arg(path)}: no such file")
    if not os.path.isfile(path):
        raise InputError(f"{_arg(path)}: not a file")
    try:
        with zipfile.ZipFile(path) as zf:
            headers = {}
            for info in zf.infolist():
                name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                with zf.open(info) as fh:
                    headers[name] = _npy_header(fh)
    except PermissionError as exc:
        raise InputError(f"{_arg(path)}: cannot read it ({exc.strerror})") from None
    except zipfile.BadZipFile:
        raise InputError(f"{_arg(path)}: not an .npz file (numpy.savez writes one)") from None
    except (OSError, ValueError, EOFError, RuntimeError, NotImplementedError) as exc:
        raise _unreadable(path, exc) from None
    return headers


def _as_model_dtype(spec: InputSpec, dtype: np.dtype) -> np.dtype:
    """The dtype an array of `dtype` is read as for `spec`: numpy stores ml_dtypes' bfloat16 as
    raw 2-byte records, taken for bfloat16 where the model wants it."""
    if spec.dtype == _BF16 and dtype.itemsize == 2 and dtype.kind in "Vu":
        return _BF16
    return dtype


def _check_arrays(path: str, specs: list[InputSpec],
                  found: Mapping[str, tuple[tuple[int, ...], np.dtype]]) -> None:
    by_name = {s.name: s for s in specs}
    extra = sorted(set(found) - set(by_name))
    if extra:
        raise InputError(f"{_arg(path)}: '{printable(extra[0])}' is not a model input "
                         f"(inputs: {printable(', '.join(by_name))})")
    for s in specs:
        if s.name not in found:
            raise InputError(f"{_arg(path)}: no array for input '{printable(s.name)}'")
        shape, dtype = found[s.name]
        dtype = _as_model_dtype(s, dtype)
        if dtype != s.dtype:
            raise InputError(f"{_arg(path)}: '{printable(s.name)}' is {dtype} but the model wants {s.dtype}")
        if s.shape is not None:
            ok = len(shape) == len(s.shape) and all(
                not isinstance(d, int) or d == a for d, a in zip(s.shape, shape))
            if not ok:
                raise InputError(f"{_arg(path)}: '{printable(s.name)}' has shape {list(shape)}, "
                                 f"model says {_fmt(s.shape)}")


def check_npz(path: str, specs: list[InputSpec]) -> None:
    """The .npz at `path` holds one array per input in `specs`, of its dtype and shape (read
    from the array headers only)."""
    _check_arrays(path, specs, npz_headers(path))


def load_npz(path: str, specs: list[InputSpec]) -> dict[str, np.ndarray]:
    """Inputs from an .npz whose keys are the model's input names."""
    check_npz(path, specs)
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, RuntimeError, zipfile.BadZipFile) as exc:
        raise _unreadable(path, exc) from None
    _check_arrays(path, specs, {k: (a.shape, a.dtype) for k, a in arrays.items()})
    out = {}
    for s in specs:
        arr = arrays[s.name]
        out[s.name] = arr.view(_BF16) if _as_model_dtype(s, arr.dtype) != arr.dtype else arr
    return out


# ------------------------------------------------------------------------------- edge hints


@dataclass(frozen=True)
class KinkSite:
    op_type: str
    attrs: dict[str, object]
    sources: dict[str, str | float | None]  # contract input name -> graph input, constant, or unknown


@dataclass
class EdgeHints:
    """What the fused nodes tell about graph inputs, so generated data hits their edges."""

    # input name -> (op type, role) for graph inputs that are a fused node's scalar input
    scalars: dict[str, tuple[str, str]] = field(default_factory=dict)
    # fused nodes whose kinks (OpSpec.kinks) generated data should hit: each node's op type,
    # attributes and the source of each of its inputs (a graph input's name, a constant, or None)
    kink_sites: list[KinkSite] = field(default_factory=list)
    # graph inputs some fused node reads straight (through Cast/Identity): these get large values,
    # float16's when a Cast on the way narrows them to float16 (True), else their own dtype's
    direct: dict[str, bool] = field(default_factory=dict)
    # graph inputs every reader Casts to float16/bfloat16 -> that dtype (onnxconverter-common's
    # keep_io_types): their values are generated in it, so that the Cast is exact and the result
    # does not depend on onnxruntime's CPU dropping Cast pairs (it computes float16 in float32)
    narrowed: dict[str, str] = field(default_factory=dict)


def _source_chain(model_inputs: set[str], producers: dict[str, onnx.NodeProto], name: str
                  ) -> tuple[str | None, bool]:
    """The graph input a value comes from through Cast/Identity chains, if any, and whether a Cast
    on the way converts to float16."""
    seen, to_half = 0, False
    while name not in model_inputs and seen < 8:
        node = producers.get(name)
        if node is None or node.domain not in ("", "ai.onnx") or node.op_type not in ("Cast", "Identity"):
            return None, False
        to_half = to_half or (node.op_type == "Cast" and any(
            a.name == "to" and a.i == onnx.TensorProto.FLOAT16 for a in node.attribute))
        name = node.input[0]
        seen += 1
    return (name, to_half) if name in model_inputs else (None, False)


def _source_input(model_inputs: set[str], producers: dict[str, onnx.NodeProto], name: str) -> str | None:
    return _source_chain(model_inputs, producers, name)[0]


def edge_hints(fused_model: onnx.ModelProto) -> EdgeHints:
    """Read the fused nodes of a fused model for input roles and thresholds; those inside bodies
    for their scalar inputs (alpha, l1, l2 of a solver's loop are drawn as the op's scalars)."""
    inputs = {vi.name for vi in fused_model.graph.input}
    producers = {o: n for n in fused_model.graph.node for o in n.output}
    consts = model_constants(fused_model)
    hints = EdgeHints()

    def src(name: str) -> str | float | None:
        if name in consts and consts[name].size == 1:
            return float(consts[name].reshape(-1)[0])
        return _source_input(inputs, producers, name)

    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in fused_model.graph.node:
        for name in set(node.input) & inputs:
            readers.setdefault(name, []).append(node)
    for name, nodes in readers.items():
        targets = {next((a.i for a in n.attribute if a.name == "to"), None) if n.op_type == "Cast" else None
                   for n in nodes}
        if len(targets) == 1 and (target := targets.pop()) in HALF_TYPES:
            hints.narrowed[name] = HALF_TYPES[target]

    for node in fused_model.graph.node:
        if not is_fused(node):
            continue
        for name in filter(None, node.input):
            source, to_half = _source_chain(inputs, producers, name)
            if source is not None:
                hints.direct[source] = hints.direct.get(source, False) or to_half
        spec = OP_SPECS[node.op_type]
        sources = {role: src(name) for role, name in zip(spec.inputs, node.input)}
        for role in spec.scalar_inputs:
            scalar = sources[role]
            if isinstance(scalar, str) and role in spec.scalar_draws:
                hints.scalars.setdefault(scalar, (node.op_type, role))
        hints.kink_sites.append(KinkSite(node.op_type, fused_attrs(node), sources))
    for node, aliases in _body_fused_nodes(fused_model):
        spec = OP_SPECS[node.op_type]
        for role, name in zip(spec.inputs, node.input):
            if role not in spec.scalar_inputs or role not in spec.scalar_draws:
                continue
            source = _source_input(inputs, producers, aliases.get(name, name))
            if source is not None:
                hints.scalars.setdefault(source, (node.op_type, role))
    return hints


def _passed_through(node: onnx.NodeProto, body: onnx.GraphProto) -> dict[str, str]:
    """The formal inputs of a Loop or Scan body that every iteration passes on unchanged (tf2onnx
    and jax2onnx carry a loop's scalars so), each with the value it starts from."""
    formals = [vi.name for vi in body.input]
    results = [vi.name for vi in body.output]
    if node.op_type == "Loop":
        pairs = [(formals[k], node.input[k], results[k - 1]) for k in range(2, min(len(formals), len(node.input)))
                 if k - 1 < len(results)]
    elif node.op_type == "Scan":
        n_scan = next((a.i for a in node.attribute if a.name == "num_scan_inputs"), 0)
        pairs = [(formals[k], node.input[k], results[k]) for k in range(len(node.input) - n_scan)
                 if k < len(formals) and k < len(results)]
    else:
        return {}
    return {formal: start for formal, start, result in pairs if formal == result}


def _body_fused_nodes(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, dict[str, str]]]:
    """The fused nodes inside If/Loop/Scan bodies, each with the names its body gives values of
    the main graph: a carried value passed on unchanged stands for the value it starts from."""
    found: list[tuple[onnx.NodeProto, dict[str, str]]] = []
    stack: list[tuple[onnx.GraphProto, dict[str, str], bool]] = [(model.graph, {}, False)]
    while stack:
        graph, aliases, inside = stack.pop()
        for node in graph.node:
            if inside and is_fused(node):
                found.append((node, aliases))
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    own = {formal: aliases.get(start, start) for formal, start in _passed_through(node, a.g).items()}
                    stack.append((a.g, {**aliases, **own}, True))
    return found


# ------------------------------------------------------------------------------- generation


def _edges(large: str | None, nonfinite: bool) -> np.ndarray:
    """The edge values; `large` names the dtype whose large magnitude is among them, if any."""
    edges = [0.0, -0.0, 1.0, -1.0, 0.5, -2.0, 1e-3, -1e-3, 3.0, -7.5]
    if large:
        edges += [_LARGE[large], -_LARGE[large]]
    if nonfinite:
        edges += [np.inf, -np.inf, np.nan]
    return np.array(edges, np.float64)


def _dtype_name(dt: np.dtype) -> str:
    return "bfloat16" if dt == _BF16 else dt.name


def _random_float(rng: np.random.Generator, spec_dtype: np.dtype, shape: tuple[int, ...],
                  nonfinite: bool, large: str | None) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    values = rng.normal(0.0, 2.0, n)
    edges = _edges(large, nonfinite)
    if n:
        k = max(1, int(n * _EDGE_SHARE)) if n > 1 else int(rng.random() < _EDGE_SHARE)
        pos = rng.choice(n, size=k, replace=False)
        values[pos] = edges[np.arange(k) % edges.size]
    with np.errstate(over="ignore"):
        return values.astype(spec_dtype).reshape(shape)


def _scalar_value(rng: np.random.Generator, draw: ScalarDraw) -> float:
    return float(rng.choice([*draw.fixed, rng.uniform(draw.low, draw.high)]))


def _plant_kinks(rng: np.random.Generator, out: dict[str, np.ndarray], site: KinkSite) -> None:
    """Plant the node's kinks where both inputs of a kink are distinct generated graph inputs."""
    spec = OP_SPECS[site.op_type]
    scalars: dict[str, float] = {}
    for role in spec.scalar_inputs:
        source = site.sources[role]
        if isinstance(source, str):
            if source not in out:
                return
            scalars[role] = float(np.asarray(out[source]).reshape(-1)[0])
        elif source is None:
            return
        else:
            scalars[role] = source
    for kink in spec.kinks(site.attrs, scalars):
        a, b = site.sources[kink.first], site.sources[kink.second]
        if isinstance(a, str) and isinstance(b, str) and a != b and a in out and b in out:
            seconds = np.array(kink.seconds)
            _plant(rng, out[a], out[b], np.concatenate([seconds + o for o in kink.offsets]),
                   np.concatenate([seconds for _ in kink.offsets]))


def _plant(rng: np.random.Generator, a: np.ndarray, b: np.ndarray, values_a: np.ndarray,
           values_b: np.ndarray) -> None:
    """Write values_a into a and values_b into b at the same random positions (in place)."""
    n = a.size
    if n == 0 or a.shape != b.shape:
        return
    k = min(n, max(1, int(n * _THRESHOLD_SHARE)))
    pos = rng.choice(n, size=k, replace=False)
    fa, fb = a.reshape(-1), b.reshape(-1)
    fa[pos] = values_a[np.arange(k) % values_a.size].astype(a.dtype)
    fb[pos] = values_b[np.arange(k) % values_b.size].astype(b.dtype)


def generate_inputs(
    specs: list[InputSpec],
    shapes: Mapping[str, tuple[int, ...]],
    seed: int,
    nonfinite: bool = False,
    hints: EdgeHints | None = None,
) -> dict[str, np.ndarray]:
    """Seeded inputs for every spec, with edges and, given hints, exact thresholds."""
    hints = hints or EdgeHints()
    out: dict[str, np.ndarray] = {}
    for index, s in enumerate(specs):
        rng = np.random.default_rng([seed, index])
        shape = shapes[s.name]
        if s.name in hints.scalars:
            op_type, role = hints.scalars[s.name]
            out[s.name] = np.full(shape, _scalar_value(rng, OP_SPECS[op_type].scalar_draws[role])).astype(s.dtype)
        elif s.dtype in _FLOATS:
            halved = hints.direct.get(s.name)
            large = None if halved is None else "float16" if halved else _dtype_name(s.dtype)
            out[s.name] = _random_float(rng, s.dtype, shape, nonfinite, large)
        elif s.dtype == np.bool_:
            out[s.name] = rng.random(shape) < 0.5
        elif s.dtype.kind in "iu":
            out[s.name] = rng.integers(0, 10, size=shape).astype(s.dtype)
        else:
            raise InputError(f"cannot generate values for input '{printable(s.name)}' of type {s.dtype}")
    rng = np.random.default_rng([seed, len(specs)])
    # the scalars a kink's position is computed from hold the values the graph narrows them to;
    # the planted values are then narrowed as the graph's Cast narrows them
    _narrow(out, hints)
    # hints name inputs; one that is also an initializer has its default and is not generated
    for site in hints.kink_sites:
        _plant_kinks(rng, out, site)
    _narrow(out, hints)
    return out


def _narrow(out: dict[str, np.ndarray], hints: EdgeHints) -> None:
    for name, dtype_name in hints.narrowed.items():
        if name in out and out[name].dtype in (np.float32, np.float64):
            out[name] = rounded_to(out[name], dtype_name)
