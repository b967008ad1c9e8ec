"""Native attention: materialised vs flash, forward + backward, per sequence length T.

Calls the native kernels directly (cffi, no autograd) in the layout a training step uses:
q, k, v read as head views of one fused projection [B, T, 3C], the output written as
[B, T, C] rows, the backward writing dq | dk | dv into one [B, T, 3C] gradient (exactly
what ``attention_qkv(flash=...)`` and its backward pass to the kernels). Causal, float32.

With ``--base REF`` the kernels of git revision REF are built too (under their own cache
key: the build key hashes the sources) and run in the same process, interleaved with the
working tree's: a before/after comparison that sees the same machine load.

Each repetition runs every contender once, in a rotating order; the table reports the
median and the interquartile range (p25-p75) of those per-call times. Forward and
backward are timed separately (their sum is the "f+b" column) so a profile of where the
time goes comes with the totals.

    python bench/native_flash.py [--base REF] [--T 64,128,256,512,1024] [--reps 15]

Writes bench/results/native_flash.json.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from common import machine, table, write_json  # noqa: E402

from backends.native import build  # noqa: E402


def build_at(ref: str) -> Any:
    """The native module compiled from the kernel sources at git revision ``ref``."""
    tmp = Path(tempfile.mkdtemp(prefix="riftco-native-base-"))
    try:
        for name in build.SOURCES:
            text = subprocess.run(
                ["git", "show", f"{ref}:backends/native/{name}"],
                cwd=ROOT, check=True, capture_output=True, text=True,
            ).stdout  # fmt: skip
            (tmp / name).write_text(text)
        saved = build._HERE
        build._HERE = tmp  # build() reads the sources (and hashes the key) from _HERE
        try:
            return build.build(build.BASE_FLAGS + build.OPENMP_FLAGS)
        finally:
            build._HERE = saved
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class Case:
    """Buffers and kernel calls for one (B, H, T, D) in the fused-projection layout."""

    def __init__(self, mod: Any, b: int, h: int, t: int, d: int, seed: int = 0) -> None:
        self.ffi, self.lib = mod.ffi, mod.lib
        c = h * d
        rng = np.random.default_rng(seed)
        self.qkv = rng.standard_normal((b, t, 3 * c), dtype=np.float32)
        self.dout = rng.standard_normal((b, t, c), dtype=np.float32)
        self.out = np.empty((b, t, c), np.float32)
        self.dqkv = np.empty((b, t, 3 * c), np.float32)
        self.probs = np.empty((b, h, t, t), np.float32) if t <= 1024 else None
        self.lse = np.empty((b, h, t), np.float32)
        self.shape = (b, h, t, d)
        self.scale = 1.0 / np.sqrt(d)
        head = [t * 3 * c, d, 3 * c]  # (b, h, t) strides of a head view of qkv
        row = [t * c, d, c]  # of [B, T, H, D] rows (out, dout)
        self.st_fwd = self.ffi.new("int64_t[]", head * 3)
        self.ost = self.ffi.new("int64_t[]", row)
        self.st_bwd_mat = self.ffi.new("int64_t[]", row + head * 3)
        self.st_bwd_flash = self.ffi.new("int64_t[]", row + head * 3 + row)
        self.ost_grad = self.ffi.new("int64_t[]", [t * 3 * c, d, 3 * c] * 3)
        p = self.ptr
        self.q, self.k, self.v = (p(self.qkv, i * c) for i in range(3))
        self.dq, self.dk, self.dv = (p(self.dqkv, i * c) for i in range(3))

    def ptr(self, a: np.ndarray, offset: int = 0) -> Any:
        return self.ffi.cast("float *", a.ctypes.data) + offset

    def forward(self, flash: bool) -> None:
        b, h, t, d = self.shape
        if flash:
            fn, stat = self.lib.flash_attention_f32, self.lse
        else:
            fn, stat = self.lib.attention_f32, self.probs
        status = fn(self.q, self.k, self.v, self.st_fwd, self.ptr(self.out), self.ost,
                    self.ptr(stat), b, h, t, d, self.scale, 1)  # fmt: skip
        assert status == 0

    def backward(self, flash: bool) -> None:
        b, h, t, d = self.shape
        p = self.ptr
        if flash:
            status = self.lib.flash_attention_backward_f32(
                p(self.dout), self.q, self.k, self.v, p(self.out), self.st_bwd_flash,
                p(self.lse), self.dq, self.dk, self.dv, self.ost_grad, b, h, t, d,
                self.scale, 1,
            )  # fmt: skip
        else:
            status = self.lib.attention_backward_f32(
                p(self.dout), self.q, self.k, self.v, self.st_bwd_mat, p(self.probs),
                self.dq, self.dk, self.dv, self.ost_grad, b, h, t, d, self.scale,
            )  # fmt: skip
        assert status == 0


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", help="git revision whose kernels run as 'before'")
    ap.add_argument("--T", default="64,128,256,512,1024")
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--H", type=int, default=4)
    ap.add_argument("--D", type=int, default=32)
    ap.add_argument("--reps", type=int, default=15, help="repetitions (each contender once)")
    ap.add_argument("--budget", type=float, default=20.0, help="max seconds per T")
    args = ap.parse_args()

    builds = {"new": build.load()}
    if args.base:
        builds = {"old": build_at(args.base), **builds}
    rec = machine()
    print(rec["summary"])
    print(f"native build {' '.join(build.build_flags())}; "
          f"threads {builds['new'].lib.rift_num_threads()}")  # fmt: skip

    rows, raw = [], {}
    for t in (int(x) for x in args.T.split(",")):
        cases = {name: Case(mod, args.B, args.H, t, args.D) for name, mod in builds.items()}
        contenders = [(name, flash) for name in builds for flash in (False, True)]
        samples: dict[tuple[str, bool], dict[str, list[float]]] = {
            c: {"fwd": [], "bwd": []} for c in contenders
        }
        for name, flash in contenders:  # warm up (first touch, clone dispatch)
            cases[name].forward(flash)
            cases[name].backward(flash)
        start = time.perf_counter()
        for rep in range(args.reps):
            order = contenders[rep % len(contenders) :] + contenders[: rep % len(contenders)]
            for name, flash in order:
                case = cases[name]
                t0 = time.perf_counter()
                case.forward(flash)
                t1 = time.perf_counter()
                case.backward(flash)
                t2 = time.perf_counter()
                samples[name, flash]["fwd"].append(t1 - t0)
                samples[name, flash]["bwd"].append(t2 - t1)
            if rep >= 4 and time.perf_counter() - start > args.budget:
                break
        for (name, flash), s in samples.items():
            tot = [a + b for a, b in zip(s["fwd"], s["bwd"])]
            lo, med, hi = quartiles([x * 1e3 for x in tot])
            mat = samples[name, False]
            mat_med = statistics.median(a + b for a, b in zip(mat["fwd"], mat["bwd"])) * 1e3
            rows.append({
                "T": t, "kernels": name, "attention": "flash" if flash else "materialised",
                "fwd ms": statistics.median(s["fwd"]) * 1e3,
                "bwd ms": statistics.median(s["bwd"]) * 1e3,
                "f+b ms": med, "p25": lo, "p75": hi, "n": len(tot),
                "vs mat": med / mat_med,
            })  # fmt: skip
            raw[f"T{t}/{name}/{'flash' if flash else 'mat'}"] = s
        print(table([r for r in rows if r["T"] == t], list(rows[0])), flush=True)
    write_json("native_flash", {
        "machine": rec, "args": vars(args), "rows": rows, "samples_s": raw,
    })  # fmt: skip


if __name__ == "__main__":
    main()
