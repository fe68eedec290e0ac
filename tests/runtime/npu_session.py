"""One process's life with the npu backend, run by test_runtime_npu_backend.py in a subprocess
(the ACL runtime is per process and released at exit, so only a process of its own shows it).

    python npu_session.py OUT.npz SEED [--acl-initialised]

ASCEND_HOME_PATH and FAKE_ACL_LOG come from the environment (a fake toolkit). The session makes
two backends, runs a SmoothL1 node on the first and a proximal update on the second, then a node
of each of the project's own operators (a Huber gradient; a folded, clamped update of float16
tensors with float32 scalars) on the second, runs the first again from another thread, shows that
the fake refuses device memory in a thread with no context, uses and closes a third backend in a
`with` block (and a quiet one), closes the second and leaves the first for the exit. OUT.npz gets
the results and what the session saw.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import sys
import threading

import numpy as np

from codegen.nodes import InputSpec, NodeSpec
from contracts.fused_ops import PROXIMAL_GD, SMOOTH_L1_GRAD
from runtime.backend import BackendError, KernelCall
from runtime.backends.npu import NpuBackend

SHAPE = (4, 300)


def calls(rng: np.random.Generator) -> dict[str, KernelCall]:
    """A node of each emitted operator: "sl1" (CANN's SmoothL1LossGradV2: one-element dout, mean),
    "prox" (CANN's ApplyProximalGradientDescent: runtime scalars), "huber" (the project's own
    SmoothL1 operator: scale 0.5, sum, a dout of predict's shape handed over as float64 for the
    backend to pass in the node's float32) and "folded" (the project's own proximal operator:
    folded scalars, a clamp, float16 tensors with float32 scalars)."""
    p, lab, d = (rng.normal(0, 2, SHAPE).astype(np.float32) for _ in range(3))
    dout = np.array(rng.normal(), np.float32)
    var, delta = (rng.normal(size=SHAPE).astype(np.float32) for _ in range(2))
    scalars = {n: np.array(v, np.float32) for n, v in (("alpha", 0.1), ("l1", 0.05), ("l2", 0.2))}
    folded = {n: np.array(v, np.float32) for n, v in (("alpha", 0.1), ("l1", 0.005), ("l2", 1.02))}
    f32, f16 = "float32", "float16"
    sl1_inputs = {"predict": InputSpec(f32, SHAPE), "label": InputSpec(f32, SHAPE)}
    prox_inputs = {n: InputSpec(f32, ()) for n in scalars}
    return {
        "sl1": KernelCall(NodeSpec("sl1", SMOOTH_L1_GRAD, {**sl1_inputs, "dout": InputSpec(f32, ())},
                                   {"sigma": 0.5, "reduction": "mean", "scale": 1.0}),
                          {"predict": p, "label": lab, "dout": dout}),
        "prox": KernelCall(NodeSpec("prox", PROXIMAL_GD, {"var": InputSpec(f32, SHAPE),
                                                          "delta": InputSpec(f32, SHAPE), **prox_inputs},
                                    {"scalar_form": "raw"}),
                           {"var": var, "delta": delta, **scalars}),
        "huber": KernelCall(NodeSpec("huber", SMOOTH_L1_GRAD, {**sl1_inputs, "dout": InputSpec(f32, SHAPE)},
                                     {"sigma": 0.5, "reduction": "sum", "scale": 0.5}),
                            {"predict": p, "label": lab, "dout": d.astype(np.float64)}),
        "folded": KernelCall(NodeSpec("folded", PROXIMAL_GD, {"var": InputSpec(f16, SHAPE),
                                                              "delta": InputSpec(f16, SHAPE), **prox_inputs},
                                      {"scalar_form": "folded", "shrink_max": 0.75}),
                             {"var": var.astype(np.float16), "delta": delta.astype(np.float16), **folded}),
    }


def main(out: str, seed: int, preinit: bool) -> None:
    rng = np.random.default_rng(seed)
    if preinit:  # another library of the process initialised ACL first
        from runtime.npu.toolkit import find_toolkit

        acl = ctypes.CDLL(str(find_toolkit().library("libascendcl.so")))
        assert acl.aclInit(None) == 0
        atexit.register(acl.aclFinalize)  # registered first, so it runs after the backend's handler
    nodes = calls(rng)
    sl1, prox = nodes["sl1"], nodes["prox"]
    notes: list[str] = []
    first = NpuBackend(notify=notes.append)
    second = NpuBackend(notify=notes.append)
    r_first = first.run(sl1)["gradient"]
    r_second = second.run(prox)["var_out"]
    r_huber = second.run(nodes["huber"])["gradient"]
    r_folded = second.run(nodes["folded"])["var_out"]

    threaded: dict[str, object] = {}

    def worker() -> None:
        threaded["gradient"] = first.run(sl1)["gradient"]
        threaded["tid"] = threading.get_native_id()

    def unbound() -> None:  # the fake's own rule, without the backend binding a context
        ptr = ctypes.c_void_p()
        threaded["unbound_status"] = first.acl.aclrtMalloc(ctypes.byref(ptr), 64, 0)

    for target in (worker, unbound):
        t = threading.Thread(target=target)
        t.start()
        t.join()
    with NpuBackend(notify=notes.append) as third:
        r_third = third.run(prox)["var_out"]
    quiet_notes: list[str] = []
    with NpuBackend(notify=quiet_notes.append, quiet=True) as quiet:
        quiet.run(sl1)
    try:
        third.run(prox)
        after_close = ""
    except BackendError as exc:
        after_close = str(exc)
    second.close()
    second.close()
    tensors = ctypes.CDLL(str(first.runtime.toolkit.library("libnnopbase.so"))).fake_live_tensors
    tensors.restype = ctypes.c_long
    np.savez(out, first=r_first, second=r_second, third=r_third, huber=r_huber, folded=r_folded,
             threaded=threaded["gradient"],
             thread_id=threaded["tid"], main_id=threading.get_native_id(),
             unbound_status=threaded["unbound_status"], after_close=after_close,
             notes="\n".join(notes), quiet_notes="\n".join(quiet_notes), live_tensors=tensors(),
             owns_acl=first.runtime.owns_acl)
    with open(os.environ["FAKE_ACL_LOG"], "a", encoding="utf-8") as log:
        log.write("session end\n")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), "--acl-initialised" in sys.argv[3:])
