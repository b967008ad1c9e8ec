"""Which OpenCL implementation drives a CPU device, and which of several CPU devices to list
first.

Why it matters: one machine may expose the same CPU twice, e.g. Debian's PoCL 3.1 (LLVM 15)
and the PoCL 3.0-rc2 wheel that ``pyopencl[pocl]`` installs (LLVM 14). Measured on an
Emerald Rapids Xeon (family 6 model 207, newer than LLVM 14), the wheel compiles for
``icelake-client`` while its built-in kernel library is built for ``skylake-avx512``; the
feature sets differ (``+clwb``), so LLVM refuses to inline builtins such as exp into a
kernel ("conflicting attributes"), and the kernels come out scalar with ~186 KB stack
frames (private per-work-item data kept in memory): 0 AVX-512 instructions and 768
scalar FMAs in our matmul where Debian's PoCL emits 64 zmm FMAs and <400-byte frames.
Kernels run 3-8x slower and a training step 3.7x slower. riftco cannot pass target
flags through (PoCL rejects ``-target-feature``/``-Xclang`` options, even in
``POCL_EXTRA_BUILD_FLAGS``), so it lists the newer PoCL first and reports the version
and target of each device.
"""

from __future__ import annotations

import re
from typing import Any

_VERSION = re.compile(r"PoCL\s+(\d+)\.(\d+)(?:\.(\d+))?(-\w+)?([+\w.~-]*)")
_LLVM = re.compile(r"LLVM\s+(\d+)\.(\d+)(?:\.(\d+))?")


def pocl_version(platform_version: str) -> str | None:
    """``"3.1+debian"`` from ``"OpenCL 3.0 PoCL 3.1+debian  Linux, ..."``; None if not PoCL."""
    m = _VERSION.search(platform_version)
    if m is None:
        return None
    return m.group(0).split(None, 1)[1]


def llvm_version(platform_version: str) -> str | None:
    m = _LLVM.search(platform_version)
    return m.group(0).split()[1] if m else None


def _numbers(text: str | None) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", text or "")[:3])


def target(device_version: str) -> dict[str, str]:
    """The PoCL driver, LLVM triple and CPU it compiles kernels for, from the device's
    ``HSTR`` (``pthread-x86_64-pc-linux-gnu-skylake-avx512``): ``{"pocl_driver": "pthread",
    "target_triple": "x86_64-pc-linux-gnu", "target_cpu": "skylake-avx512"}``; empty if
    absent."""
    m = re.search(r"HSTR:\s*(\S+)", device_version)
    if m is None:
        return {}
    parts = m.group(1).split("-")
    if len(parts) < 6:
        return {"pocl_hstr": m.group(1)}
    return {
        "pocl_driver": parts[0],
        "target_triple": "-".join(parts[1:5]),
        "target_cpu": "-".join(parts[5:]),
    }


def details(device: Any) -> dict[str, Any]:
    """What ``riftco backends`` and the benchmarks report about an OpenCL device's
    implementation: PoCL and LLVM versions and the compile target (empty for non-PoCL)."""
    platform = device.platform.version.strip()
    version = pocl_version(platform)
    if version is None:
        return {"implementation": platform}
    out: dict[str, Any] = {"pocl": version, "llvm": llvm_version(platform)}
    out.update(target(device.version))
    out["vector_width_float"] = int(device.preferred_vector_width_float)
    return out


def cpu_rank(device: Any) -> tuple[int, tuple[int, ...], int, tuple[int, ...]]:
    """Sort key (ascending = listed first) for CPU devices: vendor runtimes before PoCL,
    then newer PoCL releases (a release before its own release candidates), then newer
    LLVM. Newer LLVM knows newer CPUs, which is what decides whether PoCL vectorises."""
    platform = device.platform.version
    version = pocl_version(platform)
    if version is None:
        return (0, (), 0, ())
    pre_release = 1 if re.match(r"\d+\.\d+(\.\d+)?-", version) else 0
    neg = tuple(-n for n in _numbers(version))
    return (1, neg, pre_release, tuple(-n for n in _numbers(llvm_version(platform))))
