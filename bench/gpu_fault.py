"""A planted GPU fault, to see on real hardware what a kernel bug looks like to a user.

A kernel is launched with a pointer into nothing (a device address no allocation owns),
so the GPU raises an illegal-address fault. What must follow (issue 32):
1. the error is raised at the next synchronisation, names the CUresult and the kernel
   (with ``RIFTCO_CUDA_SYNC=1``: at the launch itself), and is a ``DeviceLostError``;
2. every later call on that device fails at once with the first error's text, instead of
   a cascade of unrelated-looking errors;
3. a conformance run on the lost device stops at its first case: one error, the rest
   listed as not run.
The fault poisons the CUDA context for the whole process, so bench/gpu_check.sh runs this
last, in a process of its own. Exit 0 when all three hold.

    python bench/gpu_fault.py [--device cuda:0]
"""

from __future__ import annotations

import argparse
import sys
import types
from typing import Any

import numpy as np

#: No allocation lives at device address 16: a kernel writing there faults.
BOGUS_POINTER = 0x10


def main(argv: list[str] | None = None, pointer: int = BOGUS_POINTER) -> int:
    """``pointer``: where the planted launch points (tests on the fake driver pass a live
    allocation and inject the fault there instead)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda:0")
    args = ap.parse_args(argv)
    import riftco
    from riftco.conformance.expectations import Expectations
    from riftco.conformance.runner import RunSettings
    from riftco.conformance.suite import resolve, run_target

    backend = riftco.device(args.device).backend
    rt = backend.runtime
    x = backend.from_numpy(np.arange(1 << 16, dtype=np.float32))
    riftco.ops.neg(x).numpy()  # loads the elementwise module: unary_neg(out, x, P)
    kernel = _loaded_kernel(rt, "unary_neg")
    problems: list[str] = []
    bogus = types.SimpleNamespace(ptr=pointer)
    params = rt.constant(np.array([1 << 20], dtype=np.int32).tobytes())
    try:
        rt.launch(kernel, 1 << 20, [bogus, bogus, params])
        rt.synchronize()
        problems.append("the planted fault raised nothing")
    except riftco.DeviceLostError as exc:
        print(f"1. fault reported: {type(exc).__name__}: {exc}")
        if "CUDA_ERROR" not in str(exc) or kernel.name not in str(exc):
            problems.append(f"the error does not name the CUresult and {kernel.name}: {exc}")
    except Exception as exc:  # noqa: BLE001 - a finding
        problems.append(f"raised {type(exc).__name__}, not DeviceLostError: {exc}")
    try:
        backend.from_numpy(np.ones(4, np.float32)).numpy()
        problems.append("a call after the fault succeeded")
    except riftco.DeviceLostError as exc:
        print(f"2. later call fails at once: {exc}")
    except Exception as exc:  # noqa: BLE001 - a finding
        problems.append(f"a later call raised {type(exc).__name__}, not DeviceLostError: {exc}")
    (target,) = resolve(args.device)
    target.ops = ["add", "neg", "matmul", "softmax"]
    results = list(run_target(target, RunSettings(max_examples=1), Expectations()))
    errors = [r for r in results if r.status == "error"]
    not_run = [r for r in results if r.reason.startswith("not run: the device was lost")]
    first = f"{errors[0].case_id}: {errors[0].reason}" if errors else "-"
    print(f"3. conformance on the lost device: {len(errors)} error, {len(not_run)} not run, "
          f"{len(results)} cases; {first}")  # fmt: skip
    if len(errors) != 1 or len(not_run) != len(results) - 1:
        problems.append(f"conformance cascaded: {len(errors)} errors of {len(results)} cases")
    for p in problems:
        print(f"FAIL {p}")
    print("gpu_fault: " + ("FAILED" if problems else "ok: named, fails fast after, no cascade"))
    return 1 if problems else 0


def _loaded_kernel(rt: Any, name: str) -> Any:
    for source, module in rt._dev.modules.items():
        if f"({name}," in source or f" {name}(" in source:
            return rt.load_kernel(module, name, "gpu_fault")
    raise SystemExit(f"gpu_fault: no loaded module defines {name}")


if __name__ == "__main__":
    sys.exit(main())
