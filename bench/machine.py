"""What a benchmark ran on, recorded next to its numbers (issue 13, "honest numbers").

Ratios between machines differ for reasons a CPU model name does not show: AVX-512 or
not, which OpenBLAS kernel core the BLAS picked at load time, which PoCL (and LLVM, and
compile target) drives an OpenCL CPU device, a hypervisor underneath. ``describe()``
collects those facts; ``summary_line()`` condenses them to one line for tables.

    python bench/machine.py          # print the record as JSON
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import re
import time
from pathlib import Path
from typing import Any

#: Thread and wait-policy variables that change what a benchmark measures.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "POCL_MAX_PTHREAD_COUNT", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")  # fmt: skip
#: x86 flags that decide which kernels run (numpy, OpenBLAS, native clones, PoCL).
ISA_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq",
    "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16",
)  # fmt: skip


def _cpuinfo() -> dict[str, str]:
    """The first processor block of /proc/cpuinfo (Linux); empty elsewhere."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    info: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        if ":" in line:
            key, value = line.split(":", 1)
            info[key.strip()] = value.strip()
    return info


def cpu() -> dict[str, Any]:
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    isa = [f for f in ISA_FLAGS if f in flags]
    v4 = {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"} <= flags
    v3 = {"avx2", "fma", "bmi2"} <= flags
    return {
        "model": info.get("model name") or platform.processor() or platform.machine(),
        "vendor": info.get("vendor_id", ""),
        "family_model_stepping": "/".join(
            info.get(k, "?") for k in ("cpu family", "model", "stepping")
        ),
        "logical_cpus": os.cpu_count(),
        "isa": isa,
        "x86_64_level": "v4 (AVX-512)" if v4 else "v3 (AVX2)" if v3 else "v2 or lower",
        "hypervisor": "hypervisor" in flags,
        "cache": info.get("cache size", ""),
    }


def blas() -> dict[str, Any]:
    """numpy's BLAS: name and version from numpy's build record, and for OpenBLAS the
    runtime configuration and the kernel core its DYNAMIC_ARCH build chose on this CPU."""
    import numpy as np

    out: dict[str, Any] = {"numpy": np.__version__}
    try:
        deps = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        out["name"], out["version"] = deps.get("name"), deps.get("version")
    except Exception as exc:  # older numpy: no dict mode
        out["name"] = f"unknown ({type(exc).__name__})"
    for path in _openblas_paths():
        lib = ctypes.CDLL(path)
        for prefix, suffix in (("scipy_openblas_", "64_"), ("openblas_", "")):
            try:
                config = getattr(lib, f"{prefix}get_config{suffix}")
                core = getattr(lib, f"{prefix}get_corename{suffix}")
            except AttributeError:
                continue
            config.restype = core.restype = ctypes.c_char_p
            out["openblas_config"] = config().decode().strip()
            out["openblas_core"] = core().decode().strip()
            return out
    return out


def _openblas_paths() -> list[str]:
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    return sorted(set(re.findall(r"(/\S*openblas\S*\.so\S*)", maps)))


def native() -> dict[str, Any]:
    """The native backend's build: compiler flags, threads, which kernel clone runs."""
    try:
        from riftco.backends.native import build

        lib = build.load().lib
    except Exception as exc:  # no compiler: say so, never fail the benchmark
        return {"available": False, "reason": str(exc).splitlines()[0][:200]}
    level = cpu()["x86_64_level"]
    return {
        "available": True,
        "flags": " ".join(build.build_flags()),
        "threads": int(lib.rift_num_threads()),
        "kernel_clone": level if platform.machine() in ("x86_64", "AMD64") else "default",
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "passive (set by riftco)"),
    }


def opencl() -> list[dict[str, Any]]:
    """Every OpenCL device riftco lists, with its PoCL/LLVM version and compile target."""
    try:
        from riftco.backends.opencl.backend import OpenCLBackend

        ok, why = OpenCLBackend.is_available()
        if not ok:
            return [{"available": False, "reason": why[:200]}]
        return [{"device": f"opencl:{d.index}", "name": d.name, **d.details}
                for d in OpenCLBackend.devices()]  # fmt: skip
    except Exception as exc:
        return [{"available": False, "reason": f"{type(exc).__name__}: {exc}"[:200]}]


def references() -> dict[str, Any]:
    """Versions (and PyTorch's CPU kernel level) of the optional comparison frameworks."""
    out: dict[str, Any] = {}
    try:
        import torch

        out["torch"] = torch.__version__
        out["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        out["torch_threads"] = torch.get_num_threads()
    except Exception:
        out["torch"] = None
    try:
        from importlib.metadata import version

        out["tinygrad"] = version("tinygrad")
    except Exception:
        out["tinygrad"] = None
    return out


def describe(with_opencl: bool = True) -> dict[str, Any]:
    import riftco

    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpu": cpu(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "riftco": riftco.__version__,
        "blas": blas(),
        "native": native(),
        "opencl": opencl() if with_opencl else [],
        "references": references(),
        "threads_env": {k: os.environ.get(k) for k in THREAD_VARS},
    }


def summary_line(record: dict[str, Any]) -> str:
    """One line for a table caption: CPU, ISA level, BLAS core, PoCL of opencl:0."""
    c, b = record["cpu"], record["blas"]
    parts = [
        f"{c['model']} ({c['vendor']} {c['family_model_stepping']}, {c['logical_cpus']} "
        f"logical CPUs{', VM' if c['hypervisor'] else ''})",
        f"x86-64 {c['x86_64_level']}",
        f"{b.get('name')} {b.get('version', '')} core {b.get('openblas_core', '?')}".strip(),
    ]
    cl0 = next((d for d in record.get("opencl", []) if d.get("device") == "opencl:0"), None)
    if cl0 and "pocl" in cl0:
        parts.append(
            f"opencl:0 PoCL {cl0['pocl']} (LLVM {cl0.get('llvm')}, target {cl0.get('target_cpu')})"
        )
    return "; ".join(parts)


if __name__ == "__main__":
    rec = describe()
    print(json.dumps(rec, indent=2, default=str))
    print(summary_line(rec))
