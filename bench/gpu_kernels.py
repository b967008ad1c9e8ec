"""riftco's kernels on an NVIDIA GPU against the device's own ceilings.

- Memory-bound ops: GB/s (bytes each op must read and write once) as a share of the
  device-to-device copy bandwidth measured here with PyTorch (or CuPy). Target: >= 70 %
  at large sizes for elementwise and row kernels (issue 15).
- fp32 matmul: GFLOP/s against cuBLAS through PyTorch (or CuPy) with TF32 off. Target:
  >= 50 % of cuBLAS. Both riftco kernels are timed (``matmul_tiled`` 64x64, ``matmul_wide``
  128x128) as well as the one the host picks.
- Flash attention forward against PyTorch SDPA (fp32), for information.

Each riftco timing queues ``reps`` calls on backend-level tensors and synchronises once
(launch cost included, no host round trip per call); references use CUDA events.

    python bench/gpu_kernels.py [--device cuda:0] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

ELEMENTWISE_TARGET = 0.70
MATMUL_TARGET = 0.50


# -- references (PyTorch first, CuPy second) ----------------------------------------------------
class Reference:
    """Copy bandwidth and cuBLAS fp32 matmul through whichever library is installed."""

    def __init__(self) -> None:
        self.name = ""
        try:
            import torch

            if torch.cuda.is_available():
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.backends.cudnn.allow_tf32 = False
                self.torch, self.name = torch, f"torch {torch.__version__}"
                return
        except Exception:
            pass
        try:
            import cupy

            self.cupy, self.name = cupy, f"cupy {cupy.__version__}"
        except Exception:
            pass

    def _time(self, fn: Callable[[], Any], reps: int) -> float:
        if hasattr(self, "torch"):
            t = self.torch
            fn()
            start, end = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / reps
        cp = self.cupy
        fn()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) / 1e3 / reps

    def copy_bandwidth(self, nbytes: int) -> float | None:
        """Bytes read plus written per second by a device-to-device copy."""
        if hasattr(self, "torch"):
            x = self.torch.empty(nbytes // 4, dtype=self.torch.float32, device="cuda")
            y = self.torch.empty_like(x)
            sec = self._time(lambda: y.copy_(x), 20)
        elif hasattr(self, "cupy"):
            x = self.cupy.empty(nbytes // 4, dtype=self.cupy.float32)
            y = self.cupy.empty_like(x)
            sec = self._time(lambda: y.__setitem__(Ellipsis, x), 20)
        else:
            return None
        return 2 * nbytes / sec

    def matmul_flops(self, m: int, n: int, k: int, tb: bool) -> float | None:
        if hasattr(self, "torch"):
            t = self.torch
            a = t.randn(m, k, device="cuda")
            b = t.randn(n, k, device="cuda") if tb else t.randn(k, n, device="cuda")
            sec = self._time(lambda: a @ (b.T if tb else b), 5)
        elif hasattr(self, "cupy"):
            cp = self.cupy
            a = cp.random.standard_normal((m, k), dtype=cp.float32)
            b = cp.random.standard_normal((n, k) if tb else (k, n), dtype=cp.float32)
            sec = self._time(lambda: a @ (b.T if tb else b), 5)
        else:
            return None
        return 2 * m * n * k / sec

    def sdpa_flops(self, shape: tuple[int, int, int, int]) -> float | None:
        if not hasattr(self, "torch"):
            return None
        t = self.torch
        q, k, v = (t.randn(*shape, device="cuda") for _ in range(3))
        sdpa = t.nn.functional.scaled_dot_product_attention
        sec = self._time(lambda: sdpa(q, k, v, is_causal=True), 10)
        b, h, s, d = shape
        return 2 * b * h * s * s * d / sec  # causal: half of 4 * B*H*T^2*D


# -- riftco ------------------------------------------------------------------------------------
def _time_riftco(backend: Any, fn: Callable[[], Any], reps: int) -> float:
    fn()
    backend.synchronize()
    samples = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        backend.synchronize()
        samples.append((time.perf_counter() - t0) / reps)
    return statistics.median(samples)


def _arr(b: Any, rng: Any, shape: tuple[int, ...], lo: float = -1.0) -> Any:
    return b.from_numpy(rng.uniform(lo, 1.0, shape).astype(np.float32))


Setup = Callable[[Any, Any], Callable[[], Any]]


def memory_cases(n: int) -> list[tuple[str, str, int, Setup]]:
    """(op, kind, bytes moved, setup(backend, rng) -> call) for about n float32 elements."""
    rows, f4 = n // 1024, 4

    def add(b: Any, r: Any) -> Callable[[], Any]:
        x, y = _arr(b, r, (n,)), _arr(b, r, (n,))
        return lambda: b.add(x, y)

    def exp(b: Any, r: Any) -> Callable[[], Any]:
        x = _arr(b, r, (n,))
        return lambda: b.exp(x)

    def mul_scalar(b: Any, r: Any) -> Callable[[], Any]:
        x = _arr(b, r, (n,))
        return lambda: b.mul_scalar(x, 3.0)

    def where(b: Any, r: Any) -> Callable[[], Any]:
        c, x, y = _arr(b, r, (n,)), _arr(b, r, (n,)), _arr(b, r, (n,))
        return lambda: b.where(c, x, y)

    def gelu(b: Any, r: Any) -> Callable[[], Any]:
        x = _arr(b, r, (n,))
        return lambda: b.gelu(x, "tanh")

    def sum_rows(b: Any, r: Any) -> Callable[[], Any]:
        x = _arr(b, r, (rows, 1024))
        return lambda: b.sum(x, (1,), False)

    def sum_cols(b: Any, r: Any) -> Callable[[], Any]:
        x = _arr(b, r, (rows, 1024))
        return lambda: b.sum(x, (0,), False)

    def softmax(b: Any, r: Any) -> Callable[[], Any]:
        x = _arr(b, r, (rows, 1024))
        return lambda: b.softmax(x)

    def layer_norm(b: Any, r: Any) -> Callable[[], Any]:
        x, g, z = _arr(b, r, (rows, 1024)), _arr(b, r, (1024,)), _arr(b, r, (1024,))
        return lambda: b.layer_norm(x, g, z, 1e-5)

    def cross_entropy(b: Any, r: Any) -> Callable[[], Any]:
        x = _arr(b, r, (n // 4096, 4096))
        t = b.from_numpy(r.integers(0, 4096, n // 4096).astype(np.int32))
        return lambda: b.cross_entropy(x, t)

    def transpose(b: Any, r: Any) -> Callable[[], Any]:
        x = _arr(b, r, (rows, 1024))
        return lambda: b.copy_strided(x.T)

    def adamw(b: Any, r: Any) -> Callable[[], Any]:
        p, g, m, v = (_arr(b, r, (n,), lo) for lo in (-1.0, -1.0, -1.0, 0.0))
        return lambda: b.adam_update(p, g, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.1, 3)

    return [
        ("add", "elementwise", 3 * f4 * n, add),
        ("exp", "elementwise", 2 * f4 * n, exp),
        ("mul_scalar", "elementwise", 2 * f4 * n, mul_scalar),
        ("where", "elementwise", 4 * f4 * n, where),
        ("gelu_tanh", "elementwise", 2 * f4 * n, gelu),
        ("adamw", "elementwise", 7 * f4 * n, adamw),
        ("sum_rows_1024", "row", f4 * n, sum_rows),
        ("sum_cols_1024", "row", f4 * n, sum_cols),
        ("softmax_1024", "row", 2 * f4 * n, softmax),
        ("layer_norm_1024", "row", 2 * f4 * n, layer_norm),
        ("cross_entropy_4096", "row", f4 * n, cross_entropy),
        ("transpose_copy", "copy", 2 * f4 * n, transpose),
    ]


def matmul_variants() -> dict[str, float | None]:
    """Values of the runtime's ``matmul_wide_min_tiles`` capability that select each kernel
    (None = the runtime's own, which RIFTCO_CUDA_WIDE_MIN_TILES sets at its creation)."""
    return {"auto": None, "tiled64": math.inf, "wide128": 1}


def run(
    device_spec: str, quick: bool, elements: int = 0, sizes: list[int] | None = None
) -> dict[str, Any]:
    import riftco

    dev = riftco.device(device_spec)
    backend = dev.backend
    ref = Reference()
    rng = np.random.default_rng(0)
    report: dict[str, Any] = {"device": device_spec, "reference": ref.name or None}
    info = {d.index: d for d in type(backend).devices()}.get(dev.index)
    report["gpu"] = {"name": info.name, **info.details} if info else None
    n = elements or ((1 << 24) if quick else (1 << 26))
    bw = ref.copy_bandwidth(4 * n)
    report["copy_bandwidth_GBps"] = bw / 1e9 if bw else None
    print(f"device {device_spec}: {report['gpu']}")
    print(f"reference {ref.name or 'none'}: copy bandwidth {report['copy_bandwidth_GBps']} GB/s")
    rows = []
    for op, kind, nbytes, setup in memory_cases(n):
        try:
            call = setup(backend, rng)
            sec = _time_riftco(backend, call, 10)
        except Exception as exc:  # one broken kernel must not hide the other numbers
            print(f"{op:20s} error: {type(exc).__name__}: {exc}"[:200])
            rows.append({"op": op, "kind": kind, "error": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        gbps = nbytes / sec / 1e9
        share = gbps * 1e9 / bw if bw else None
        ok = None if share is None or kind == "copy" else share >= ELEMENTWISE_TARGET
        rows.append({"op": op, "kind": kind, "elements": n, "ms": sec * 1e3, "GBps": gbps,
                     "share_of_copy": share, "meets_target": ok})  # fmt: skip
        pct = f"{100 * share:5.1f} %" if share is not None else "   n/a"
        print(f"{op:20s} {sec * 1e3:9.3f} ms {gbps:9.1f} GB/s {pct} of copy")
    report["memory_bound"] = rows
    mm_rows = []
    sizes = sizes or ([1024, 2048, 4096] if quick else [1024, 2048, 4096, 8192])
    for m in sizes:
        for tb in (False, True):
            if tb and m != sizes[-1] and m != 4096:
                continue
            cublas = ref.matmul_flops(m, m, m, tb)
            a = backend.from_numpy(rng.standard_normal((m, m)).astype(np.float32))
            b = backend.from_numpy(rng.standard_normal((m, m)).astype(np.float32))
            own = backend.runtime.capabilities
            for variant, tiles in matmul_variants().items():
                if tiles is not None:
                    caps = dataclasses.replace(own, matmul_wide_min_tiles=tiles)
                    backend.runtime.capabilities = caps
                try:
                    reps = max(1, min(20, int(4e11 // (2 * m**3))))
                    call = functools.partial(backend.matmul, a, b, False, tb)
                    sec = _time_riftco(backend, call, reps)
                except Exception as exc:
                    print(f"matmul {m} {variant}: {type(exc).__name__}: {exc}"[:200])
                    continue
                finally:
                    backend.runtime.capabilities = own
                flops = 2 * m**3 / sec
                share = flops / cublas if cublas else None
                ok = None if share is None else share >= MATMUL_TARGET
                mm_rows.append({"m=n=k": m, "transpose_b": tb, "kernel": variant,
                                "ms": sec * 1e3, "GFLOPs": flops / 1e9,
                                "cublas_GFLOPs": cublas / 1e9 if cublas else None,
                                "share_of_cublas": share, "meets_target": ok})  # fmt: skip
                pct = f"{100 * share:5.1f} %" if share is not None else "   n/a"
                ref_g = cublas / 1e9 if cublas else float("nan")
                print(f"matmul {m:5d}{'NT' if tb else 'NN'} {variant:8s} {flops / 1e9:9.0f} "
                      f"GFLOP/s {pct} of cuBLAS ({ref_g:.0f})")  # fmt: skip
    report["matmul_fp32"] = mm_rows
    shape = (4, 16, 1024, 64)
    try:
        q, k, v = (backend.from_numpy(rng.standard_normal(shape).astype(np.float32)) for _ in "qkv")
        sec = _time_riftco(backend, lambda: backend.flash_attention(q, k, v, 0.125, True), 5)
        flops = 2 * shape[0] * shape[1] * shape[2] ** 2 * shape[3] / sec
        sdpa = ref.sdpa_flops(shape)
        report["flash_attention"] = {"shape": shape, "ms": sec * 1e3, "GFLOPs": flops / 1e9,
                                     "sdpa_GFLOPs": sdpa / 1e9 if sdpa else None}  # fmt: skip
        print(f"flash_attention {shape}: {flops / 1e9:.0f} GFLOP/s (SDPA fp32: "
              f"{sdpa / 1e9 if sdpa else float('nan'):.0f})")  # fmt: skip
    except Exception as exc:
        report["flash_attention"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        print(f"flash_attention: {type(exc).__name__}: {exc}"[:200])
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--quick", action="store_true", help="16M elements, matmul up to 4096")
    ap.add_argument("--json", default="")
    ap.add_argument("--elements", type=int, default=0, help="memory-bound size (smoke runs)")
    ap.add_argument("--matmul-sizes", default="", help="comma list (smoke runs)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.matmul_sizes.split(",") if s]
    try:
        report = run(args.device, args.quick, args.elements, sizes)
    except Exception as exc:  # e.g. the backend is unavailable: say so, exit non-zero
        print(f"gpu_kernels: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2, default=str)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
