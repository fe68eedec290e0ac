"""The model-local functions a set of nodes calls, directly or through other functions.

Every model onnxruntime runs here (a segment of standard nodes, the batch of fused-node
references) gets only the functions its nodes need: a fused model carries one function per
fused node, and handing all of them to every session makes a diff quadratic in the number of
fused nodes.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx

FunctionKey = tuple[str, str, str]  # (domain, name, overload): what a node's call resolves by


def function_key(node: onnx.NodeProto) -> FunctionKey:
    return node.domain, node.op_type, node.overload


class LocalFunctions:
    """Index of a model's local functions, for lookups by call and closures over calls."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self._by_key: dict[FunctionKey, onnx.FunctionProto] = {}
        for fn in model.functions:
            self._by_key.setdefault((fn.domain, fn.name, fn.overload), fn)

    def called_by(self, node: onnx.NodeProto) -> onnx.FunctionProto | None:
        """The function `node` calls, if it calls one of the model's."""
        return self._by_key.get(function_key(node))

    def needed_by(self, nodes: Iterable[onnx.NodeProto]) -> list[onnx.FunctionProto]:
        """Functions the nodes call, those functions call, and so on (also from If/Loop/Scan
        bodies), each once, in the model's order."""
        found: set[FunctionKey] = set()
        pending = list(nodes)
        while pending:
            node = pending.pop()
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    pending.extend(a.g.node)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    pending.extend(n for g in a.graphs for n in g.node)
            key = function_key(node)
            fn = self._by_key.get(key)
            if fn is not None and key not in found:
                found.add(key)
                pending.extend(fn.node)
        return [fn for key, fn in self._by_key.items() if key in found]
