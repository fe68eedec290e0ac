"""Model-local ONNX functions that carry each fused node's matched subgraph.

Values are renamed canonically (formal inputs, _c<k> for constants, _v<k> for intermediates in
definition order), so identical subgraphs give identical functions and share one overload. Most
fusions of a model repeat a few structures that differ only in their constants (every weight's
update, every loss term), so each structure is built and checked once as a template, and a new
body is that template with its constants filled in.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import onnx

from . import verify
from .errors import LoweringError
from .fused_ops import DOMAIN, OP_SPECS
from .graph import GraphIndex, Node


class FunctionBodies:
    def __init__(self, index: GraphIndex, opset: int, fresh: Callable[[str], str], functions) -> None:
        self.index = index
        self.opset = opset
        self.fresh = fresh  # a model-wide unused name for each new overload
        self.functions = functions  # the output model's functions, written in place (no copy)
        self._templates: dict[tuple, onnx.FunctionProto] = {}
        self._overloads: dict[tuple, str] = {}

    def overload(self, op_type: str, members: list[int], input_names: list[str], output: str) -> str:
        """The overload whose body computes `output` from `input_names` with nodes `members`."""
        spec = OP_SPECS[op_type]
        nodes: list[Node] = [self.index.nodes[i] for i in members]
        rename: dict[str, str] = {}
        for formal, actual in zip(spec.inputs, input_names):
            rename.setdefault(actual, formal)
        rename[output] = spec.outputs[0]
        produced = {o for n in nodes for o in n.output}
        counter = itertools.count()
        constants: list[onnx.TensorProto] = []
        for node in nodes:
            for name in node.input:
                if not name or name in rename or name in produced:
                    continue
                rename[name] = f"_c{next(counter)}"
                try:
                    source = self.index.const_tensor(name)
                except KeyError:
                    raise LoweringError(f"internal error: a fused {op_type} reads {name}, "
                                        "which is neither an input nor a constant") from None
                tensor = onnx.TensorProto()
                tensor.CopyFrom(source)
                tensor.name = rename[name]
                constants.append(tensor)
        for node in nodes:  # definition order, so the names do not depend on the model's names
            for name in node.output:
                if name and name not in rename:
                    rename[name] = f"_v{next(counter)}"
        rename[""] = ""  # an optional input or output left out
        canonical = rename.__getitem__
        structure = (op_type, len(constants), tuple(
            (n.op_type, n.domain, tuple(map(canonical, n.input)), tuple(map(canonical, n.output)),
             tuple(a.SerializeToString(deterministic=True) for a in n.attribute) if len(n.attribute) else ())
            for n in nodes))
        key = (structure, tuple(t.SerializeToString(deterministic=True) for t in constants))
        overload = self._overloads.get(key)
        if overload is None:
            function = self.functions.add()
            function.CopyFrom(self._template(structure, nodes))
            for k, tensor in enumerate(constants):
                function.node[k].attribute[0].t.CopyFrom(tensor)
            function.overload = overload = self._overloads[key] = self.fresh(f"{op_type}_f{len(self._overloads)}")
        return overload

    def _template(self, structure: tuple, nodes: list[Node]) -> onnx.FunctionProto:
        template = self._templates.get(structure)
        if template is not None:
            return template
        op_type, n_constants, body = structure
        spec = OP_SPECS[op_type]
        template = onnx.FunctionProto(domain=DOMAIN, name=op_type, input=spec.inputs, output=spec.outputs)
        template.opset_import.add(domain="", version=self.opset)
        for k in range(n_constants):
            template.node.add(op_type="Constant", output=[f"_c{k}"]).attribute.add(
                name="value", type=onnx.AttributeProto.TENSOR)
        for node, (op, domain, inputs, outputs, _) in zip(nodes, body):
            copy = template.node.add(op_type=op, domain=domain, input=inputs, output=outputs)
            if len(node.attribute):
                copy.attribute.extend(node.attribute)
        verify.check_function(template)
        self._templates[structure] = template
        return template
