"""What every layer reads and none owns: the contract of the fused ops (contracts.fused_ops: op
types, inputs, attributes, float64 references, proof specs) and the tool's error types
(contracts.errors). The graph pass emits nodes by this contract, codegen and runtime implement it,
and it imports nothing of theirs."""
