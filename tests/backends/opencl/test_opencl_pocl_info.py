"""Which PoCL and which compile target an OpenCL CPU device reports, and how CPU devices
rank (issue 13): parsed from the strings PoCL really returns, on fake devices, so these
run without any OpenCL installed."""

from __future__ import annotations

from types import SimpleNamespace

from riftco.backends.opencl import pocl

DEBIAN = (
    "OpenCL 3.0 PoCL 3.1+debian  Linux, None+Asserts, RELOC, SPIR, LLVM 15.0.6, SLEEF, "
    "DISTRO, POCL_DEBUG"
)
WHEEL = "OpenCL 3.0 PoCL 3.0-rc2  Linux, Release, RELOC, LLVM 14.0.6, SLEEF, DISTRO, POCL_DEBUG"
INTEL = "OpenCL 3.0 LINUX"


def _device(platform: str, version: str, name: str = "cpu") -> SimpleNamespace:
    return SimpleNamespace(
        name=name,
        version=version,
        platform=SimpleNamespace(version=platform),
        preferred_vector_width_float=16,
    )


def test_versions_and_target_from_real_strings():
    assert pocl.pocl_version(DEBIAN) == "3.1+debian"
    assert pocl.pocl_version(WHEEL) == "3.0-rc2"
    assert pocl.pocl_version(INTEL) is None
    assert pocl.llvm_version(DEBIAN) == "15.0.6" and pocl.llvm_version(WHEEL) == "14.0.6"
    hstr = "OpenCL 3.0 PoCL HSTR: pthread-x86_64-pc-linux-gnu-skylake-avx512"
    assert pocl.target(hstr) == {
        "pocl_driver": "pthread",
        "target_triple": "x86_64-pc-linux-gnu",
        "target_cpu": "skylake-avx512",
    }
    assert (
        pocl.target("OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-icelake-client")[
            "target_cpu"
        ]
        == "icelake-client"
    )
    assert pocl.target("OpenCL 1.2 CUDA") == {}


def test_details_of_a_pocl_and_a_vendor_device():
    d = pocl.details(
        _device(WHEEL, "OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-znver3")
    )
    assert d["pocl"] == "3.0-rc2" and d["llvm"] == "14.0.6" and d["target_cpu"] == "znver3"
    assert d["vector_width_float"] == 16
    assert pocl.details(_device(INTEL, "OpenCL 3.0 (Build 0)")) == {"implementation": INTEL}


def test_cpu_ranking_prefers_vendor_then_newer_pocl_release_then_llvm():
    wheel = _device(WHEEL, "", "wheel")
    debian = _device(DEBIAN, "", "debian")
    intel = _device(INTEL, "", "intel")
    final_30 = _device(WHEEL.replace("3.0-rc2", "3.0"), "", "3.0 final")
    newer_llvm = _device(DEBIAN.replace("LLVM 15.0.6", "LLVM 16.0.1"), "", "debian llvm16")
    ranked = sorted([wheel, final_30, debian, newer_llvm, intel], key=pocl.cpu_rank)
    assert [d.name for d in ranked] == ["intel", "debian llvm16", "debian", "3.0 final", "wheel"]
