"""Model-local ONNX functions that carry each fused node's matched subgraph.

Values are renamed canonically (formal inputs, _v<k> for intermediates in definition order, _c<k>
for constants), so identical subgraphs with identical constants share one overload. Most
fusions of a model repeat a few structures that differ only in their constants (every weight's
update, every loss term), so each structure is built and checked once as a template, and a new
body is that template with its constants filled in.
"""

from __future__ import annotations

import onnx

from contracts.errors import LoweringError
from contracts.fused_ops import DOMAIN, OP_SPECS

from . import verify
from .graph import GraphIndex, Node, array_key, tensor_key
from .normalize import ATTRIBUTE_FREE


def _attribute_key(node: Node) -> tuple[bytes, ...]:
    if node.op_type in ATTRIBUTE_FREE and not node.domain:
        return ()  # most matched nodes: no attribute container to read
    return tuple(a.SerializeToString(deterministic=True) for a in node.attribute)


class FunctionBodies:
    def __init__(self, index: GraphIndex, opset: int, functions, taken: set[tuple[str, str]] | None = None) -> None:
        self.index = index
        self.opset = opset
        self.functions = functions  # the output model's functions, written in place (no copy)
        # overload names are unique per (domain, op type); a model fused before already has some,
        # and `taken` holds those of the model's other graphs when this is one of several
        self._taken = taken if taken is not None else {(f.name, f.overload) for f in functions if f.domain == DOMAIN}
        self._templates: dict[tuple, onnx.FunctionProto] = {}
        self._overloads: dict[tuple, str] = {}
        self._values: dict[str, tuple] = {}  # constant name -> its exact value, as a key

    def overload(self, op_type: str, members: list[int], input_names: list[str], output: str) -> str:
        """The overload whose body computes `output` from `input_names` with nodes `members`."""
        spec = OP_SPECS[op_type]
        all_nodes = self.index.nodes
        rename: dict[str, str] = {"": ""}  # an optional input or output left out stays empty
        for formal, actual in zip(spec.inputs, input_names):
            rename.setdefault(actual, formal)
        rename[output] = spec.outputs[0]
        constants: list[str] = []
        body = []
        nodes: list[Node] = []
        # one pass in definition order, so the names do not depend on the model's names: the
        # members are in topological order, so an input not named yet is a constant
        for i in members:
            node = all_nodes[i]
            nodes.append(node)
            inputs = []
            for name in node.input:
                canonical = rename.get(name)
                if canonical is None:
                    canonical = rename[name] = f"_c{len(constants)}"
                    constants.append(name)
                inputs.append(canonical)
            outputs = []
            for name in node.output:
                canonical = rename.get(name)
                if canonical is None:
                    canonical = rename[name] = f"_v{len(rename)}"
                outputs.append(canonical)
            body.append((node.op_type, node.domain, tuple(inputs), tuple(outputs), _attribute_key(node)))
        structure = (op_type, len(constants), tuple(body))
        key = (structure, tuple(map(self._value_key, constants)))
        overload = self._overloads.get(key)
        if overload is None:
            function = self.functions.add()
            function.CopyFrom(self._template(structure, nodes))
            for k, name in enumerate(constants):
                tensor = function.node[k].attribute[0].t
                tensor.CopyFrom(self.index.const_tensor(name))
                tensor.name = f"_c{k}"
            function.overload = overload = self._overloads[key] = self._fresh(op_type)
        return overload

    def _value_key(self, name: str) -> tuple:
        key = self._values.get(name)
        if key is None:
            init = self.index.initializers.get(name)
            if init is not None:
                key = tensor_key(init)
            else:
                value = self.index.const(name)
                if value is None:
                    raise LoweringError(f"internal error: a fused node reads {name}, "
                                        "which is neither an input nor a constant")
                key = array_key(value)
            self._values[name] = key
        return key

    def _fresh(self, op_type: str) -> str:
        k = len(self._overloads)
        while (op_type, name := f"{op_type}_f{k}") in self._taken:
            k += 1
        self._taken.add((op_type, name))
        return name

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
        for node, (op, domain, inputs, outputs, attributes) in zip(nodes, body):
            copy = template.node.add(op_type=op, domain=domain, input=inputs, output=outputs)
            if attributes:
                copy.attribute.extend(node.attribute)
        verify.check_function(template)
        self._templates[structure] = template
        return template
