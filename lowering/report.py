"""What the pass did and why: fusions, rejected near-matches and normalization counts."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from .terminal import printable

REASON_LIMIT = 400  # a reason quotes names; a 5000-character name still gives a readable line


@dataclass
class Fusion:
    pattern: str
    node: str
    op_type: str
    domain: str
    output: str
    inputs: list[str]
    attributes: dict[str, object]
    dtype: str
    replaced_nodes: list[str]
    caveats: list[str] = field(default_factory=list)
    graph: str = ""  # the subgraph it is in ("Loop_3/body"); empty for the main graph
    # fused under assume_finite: equal to the graph wherever inputs and result are finite
    assumed_finite: bool = False


@dataclass
class Rejection:
    pattern: str
    anchor: str
    op_type: str
    reason: str
    graph: str = ""  # the subgraph it is in ("Loop_3/body"); empty for the main graph


@dataclass
class FusionReport:
    fusions: list[Fusion] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    normalization: dict[str, int] = field(default_factory=dict)
    nodes_before: int = 0
    nodes_after: int = 0
    inlined_functions: list[str] = field(default_factory=list)  # local functions whose calls were inlined to fuse
    nodes_inlined: int = 0  # main-graph nodes after that inlining (nodes_before counts the model's own)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.fusions:
            out[f.op_type] = out.get(f.op_type, 0) + 1
        return out

    def to_dict(self) -> dict:
        data = asdict(self)
        data["counts"] = self.counts()
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    def summary(self, limit: int | None = None) -> str:
        """The counts, then each fusion and each near miss; `limit` caps how many of each are
        listed (a big model has thousands; report.json has them all)."""
        lines = [f"{self.nodes_before} nodes -> {self.nodes_after} nodes; "
                 f"{len(self.fusions)} fused, {len(self.rejections)} near-matches not fused"]
        if self.inlined_functions:
            names = ", ".join(printable(n) for n in self.inlined_functions)
            lines.append(f"  inlined  the calls of local functions {names} to fuse inside them "
                         f"({self.nodes_before} -> {self.nodes_inlined} nodes before fusing)")
        for f in self.fusions[:limit]:
            attrs = ", ".join(f"{k}={v}" for k, v in f.attributes.items())
            lines.append(f"  fused    {printable(f.node)}{_where(f.graph)}: {f.op_type}({attrs}) [{f.dtype}] "
                         f"from {len(f.replaced_nodes)} nodes ({f.pattern})")
            lines.extend(f"           note: {printable(c, REASON_LIMIT)}" for c in f.caveats)
        lines += more_line(len(self.fusions), limit, "fusions")
        for r in self.rejections[:limit]:
            lines.append(f"  skipped  {printable(r.anchor)}{_where(r.graph)} ({r.op_type}, {r.pattern}): "
                         f"{printable(r.reason, REASON_LIMIT)}")
        lines += more_line(len(self.rejections), limit, "near-matches")
        return "\n".join(lines)


def _where(graph: str) -> str:
    return f" in {printable(graph)}" if graph else ""


def more_line(total: int, limit: int | None, what: str) -> list[str]:
    """The line that says how many a capped listing left out (none when it left nothing out)."""
    if limit is None or total <= limit:
        return []
    return [f"  ... and {total - limit} more {what} (all in report.json)"]
