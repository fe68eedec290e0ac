"""The CPU golden of the aclnn example: the kernel IR evaluated element by element in double.

Loads, casts up and casts down are identities (the golden keeps double precision, as the CANN
precision standard asks of a golden); everything else follows codegen/ir.py, so the device
result is compared with the same computation done at higher precision.
"""

from __future__ import annotations

from collections.abc import Mapping

from codegen.emit.cxx import nan_max_expr, nan_min_expr, scalar_expr
from codegen.ir import Kernel, Kind, Op

_BIN = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.DIV: "/", Op.MULS: "*", Op.ADDS: "+"}
_CMP = {"LT": "<", "GT": ">", "EQ": "==", "LE": "<=", "GE": ">=", "NE": "!="}


def _tile_expr(k: Kernel, i: int, v: dict[int, str], index: Mapping[str, str]) -> str:
    ins = k.instrs[i]
    a = [v[s] for s in ins.srcs]
    if ins.op is Op.COPY_IN:
        return f"{ins.attr('name')}[e]"
    if ins.op is Op.COPY_IN_BCAST:
        return f"{ins.attr('name')}[{index[str(ins.attr('name'))]}]"
    if ins.op is Op.COPY_IN_BRC:
        return f"{ins.attr('name')}[0]"
    if ins.op is Op.CAST:
        return a[0]
    if ins.op in _BIN:
        return f"({a[0]} {_BIN[ins.op]} {a[1]})"
    if ins.op is Op.MAXS:
        return nan_max_expr(a[0], a[1])
    if ins.op is Op.MINS:
        return nan_min_expr(a[0], a[1])
    if ins.op is Op.ABS:
        return f"std::fabs({a[0]})"
    if ins.op is Op.SIGN:
        return f"({a[0]} > 0.0 ? 1.0 : ({a[0]} < 0.0 ? -1.0 : 0.0))"
    if ins.op is Op.COMPARE:
        return f"({a[0]} {_CMP[str(ins.attr('mode'))]} {a[1]})"
    if ins.op is Op.SELECT:
        return f"({a[0]} ? {a[1]} : {a[2]})"
    if ins.op is Op.DUPLICATE:
        return a[0]
    raise ValueError(f"no golden for {ins.op.value}")


def golden_function(k: Kernel, index: Mapping[str, str] | None = None) -> str:
    """C++ `static void Golden(...)`: streamed inputs as vectors, scalar inputs as 1-element ones;
    `index` gives, per broadcast input, the C++ expression of the element output element e reads."""
    index = index or {}
    params = ", ".join(f"const std::vector<double>& {p.name}" for p in k.inputs)
    outs = ", ".join(f"std::vector<double>& {p.name}" for p in k.outputs)
    first = next(p.name for p in k.inputs if p.kind is Kind.TILE)
    v: dict[int, str] = {}
    lines = [f"static void Golden({params}, {outs})", "{"]
    for i, ins in enumerate(k.instrs):
        if ins.kind is not Kind.SCALAR:
            continue
        v[i] = f"s{i}"
        if ins.op is Op.SCONST:
            expr = repr(float(ins.attr("value")))  # type: ignore[arg-type]
            expr = {"nan": 'std::nan("")', "inf": "HUGE_VAL", "-inf": "(-HUGE_VAL)"}.get(expr, expr)
        elif ins.op is Op.SINPUT:
            expr = f"{ins.attr('name')}[0]"
        elif ins.op is Op.SNUMEL:
            expr = f"static_cast<double>({ins.attr('name')}.size())"
        else:
            expr = scalar_expr(ins, v).replace("1.0f", "1.0")
        lines.append(f"    const double s{i} = {expr};")
    lines.append(f"    for (size_t e = 0; e < {first}.size(); ++e) {{")
    for i, ins in enumerate(k.instrs):
        if ins.kind is Kind.SCALAR:
            continue
        if ins.op is Op.COPY_OUT:
            lines.append(f"        {ins.attr('name')}[e] = {v[ins.srcs[0]]};")
            continue
        v[i] = f"v{i}"
        ctype = "bool" if ins.kind is Kind.MASK else "double"
        lines.append(f"        const {ctype} v{i} = {_tile_expr(k, i, v, index)};")
    lines += ["    }", "}"]
    return "\n".join(lines)
