"""CPU twin: the emitted AscendC op_kernel sources compiled unmodified with g++ and run per block.

`include/` is a C++17 header set written for this project (kernel_operator.h and the few host
headers the emitted tiling function includes). It implements exactly the AscendC subset the
emitter uses, with the documented signatures, and the IR's numerics (codegen/ir.py). Every API
call checks the hardware rules and throws; the launcher reports the first rule broken:

    ub-overflow       InitBuffer total over the target's usable UB
    ub-alignment      a UB operand not 32-byte aligned
    ub-bounds         an operand that runs past the end of its UB buffer
    init-buffer       InitBuffer twice on one queue/buffer, or of zero buffers or bytes
    datacopy-length   DataCopy of a length that is not whole 32-byte blocks (hardware rounds down)
    datacopypad-params  DataCopyPad blockCount/blockLen outside the documented ranges
    compare-count     Compare/Compares count not covering whole 256-byte repeats
    queue-balance     AllocTensor/EnQue/DeQue/FreeTensor out of order, or left unbalanced
    tensor-state      a queue tensor used while enqueued or after FreeTensor
    overlap           a partial dst/src overlap (or any overlap where the API forbids it)
    select-temp       Select tensor modes without the 8 KiB UB temp space (ascend910b/910_93)
    select-mode       a Select mode that does not fit the overload (tensor vs scalar src1)
    sign-tmp          Sign's temp buffer under GetSignMaxMinTmpSize's minimum
    cast-mode, cast-same-type  a rounding mode the Cast table does not allow; float->float Cast
    gather-offset     a Gather offset or base that is not a whole element
    gather-count      a Gather count over its source's elements or over 255 repeats
    dtype             Compare/Select on bfloat16 outside ascend950
    count             a negative element count
    gm-bounds, gm-write, gm-coverage  GM access outside its buffer, a write to an input,
                      an output element written by no block or by two
    tiling-key, tiling-size  no TILING_KEY_IS branch taken; tiling data smaller than the struct
    unsupported       an API form outside the emitted subset (other calls do not compile)
    launch, internal  an AscendC call outside a launch; out of memory or a C++ exception

Modules: toolchain (compiler, flags, cache dir), sources (what gets compiled), build (compile
and cache), library (the ctypes side of one compiled kernel), kernel (artifact -> tiling ->
launch), errors.
"""
