"""The Metal path without a Mac: MSL syntax check, and the Metal host code on a stand-in.

1. The Metal expansion of every kernel family (exactly the string the Metal backend
   compiles) passes ``g++ -fsyntax-only`` against shaders/stubs/metal_stdlib.
2. ``MetalBackend`` runs every primitive case through ``standin.py``, a metalcompute
   look-alike over OpenCL with Metal's dispatch rules (group size a per-function multiple
   of 32 unknown to the host, grid rounded up to whole groups, buffers bound in order).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib import resources

import numpy as np
import pytest
from _gpu_cases import CASES, assert_close
from riftco.errors import KernelCompileError
from riftco.kernel_host.sources import expand_includes, families, program_source

GXX = shutil.which("g++")
_FAMILY_DEFINES = {"cast": {"SRC": "int"}}


@pytest.mark.skipif(GXX is None, reason="g++ is not installed: the MSL syntax check needs it")
@pytest.mark.parametrize("family", families())
def test_metal_expansion_compiles(family, tmp_path):
    src = program_source(family, np.dtype(np.float32), None, _FAMILY_DEFINES.get(family))
    stubs = resources.files("riftco.shaders").joinpath("stubs")
    path = tmp_path / f"{family}.metal.cpp"
    path.write_text(src)
    cmd = [GXX, "-std=c++17", "-fsyntax-only", "-Wno-attributes", "-D__METAL_VERSION__=300",
           "-I", str(stubs), "-x", "c++", str(path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{family}.cl is not valid under the Metal prelude:\n{proc.stderr}"


@pytest.mark.skipif(GXX is None, reason="g++ is not installed: the MSL syntax check needs it")
def test_syntax_check_catches_metal_only_errors(tmp_path):
    """The check must be able to fail: erf is absent in Metal, and so in the stub."""
    src = program_source("copy", np.dtype(np.float32)) + (
        "\nKERNEL void uses_erf(GLOBAL T* out ARG(0) THREAD_ARGS) { out[GID] = erf(out[GID]); }\n"
    )
    path = tmp_path / "bad.cpp"
    path.write_text(src)
    stubs = resources.files("riftco.shaders").joinpath("stubs")
    proc = subprocess.run(
        [GXX, "-std=c++17", "-fsyntax-only", "-Wno-attributes", "-D__METAL_VERSION__=300",
         "-I", str(stubs), "-x", "c++", str(path)],  # fmt: skip
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode != 0 and "erf" in proc.stderr


# -- host-side #include: metalcompute gets one string, so headers are inlined by the host -----
_FAKE = {
    "a.h": '#include "b.h"\nint a;\n',
    "b.h": "int b;\n",
    "loop1.h": '#include "loop2.h"\n',
    "loop2.h": '#include "loop1.h"\n',
}


def test_include_inlines_each_header_once():
    src = '#include <metal_stdlib>\n#include "a.h"\n  #include "b.h"  // again\nint main;\n'
    out = expand_includes(src, "x.cl", _FAKE.__getitem__)
    assert out.count("int b;") == 1 and out.count("int a;") == 1
    assert out.index("int b;") < out.index("int a;") < out.index("int main;")
    assert "#include <metal_stdlib>" in out  # angle includes are the compiler's business
    assert not [ln for ln in out.splitlines() if ln.lstrip().startswith('#include "')]


def test_include_cycle_and_missing_header_are_errors():
    with pytest.raises(KernelCompileError, match=r"x\.cl -> loop1\.h -> loop2\.h -> loop1\.h"):
        expand_includes('#include "loop1.h"\n', "x.cl", _FAKE.__getitem__)
    with pytest.raises(KernelCompileError, match='x.cl includes "nope.h"'):
        expand_includes('#include "nope.h"\n', "x.cl", _FAKE.__getitem__)


@pytest.mark.parametrize("family", families())
def test_every_program_is_one_self_contained_string(family):
    src = program_source(family, np.dtype(np.float32), None, _FAMILY_DEFINES.get(family))
    assert not [ln for ln in src.splitlines() if ln.lstrip().startswith('#include "')]
    assert src.count("#define RIFTCO_PRELUDE_H") == 1
    if "/* begin rows.h */" in src:
        assert src.count("INLINE T rt_team_sum(") == 1


@pytest.mark.skipif(sys.platform == "darwin", reason="on macOS the real metalcompute decides")
def test_unavailable_off_mac_with_reason(monkeypatch):
    from riftco.backends.metal.backend import MetalBackend

    monkeypatch.delenv("RIFTCO_METAL_STANDIN", raising=False)
    monkeypatch.delenv("RIFTCO_METAL_RUNTIME", raising=False)
    ok, reason = MetalBackend.is_available()
    assert not ok and "macOS" in reason and "RIFTCO_METAL_STANDIN" in reason
    assert MetalBackend.devices() == []


# -- the Metal backend's host code on the stand-in ---------------------------------------------
clrt = pytest.importorskip("riftco.backends.opencl.runtime", reason="pyopencl import failed")
_devices, _why = clrt.enumerate_devices()
needs_cl = pytest.mark.skipif(not _devices, reason=f"stand-in needs OpenCL: {_why}")


@pytest.fixture(scope="module")
def metal():
    from riftco.backends.metal import standin
    from riftco.backends.metal.backend import MetalBackend

    return MetalBackend(0, mc_module=standin)


@needs_cl
@pytest.mark.parametrize("name", sorted(CASES))
def test_primitive_on_standin(metal, name):
    got, want, tol = CASES[name](metal, np.random.default_rng(3), np.dtype(np.float32))
    assert_close(name, got, want, tol)


@needs_cl
def test_standin_follows_metal_dispatch_rules(metal):
    import riftco.ops as ops
    from riftco.backends.metal import standin

    x = metal.from_numpy(np.arange(1000, dtype=np.float32).reshape(10, 100))
    ops.sum(x, (1,))
    fn = metal.kernel("reduce", "sum_rows", np.dtype(np.float32))
    assert isinstance(fn, standin.Function)
    assert fn.group_size % 32 == 0 and fn.group_size in standin.GROUP_CHOICES
    # no float64 on Metal: refused before any kernel runs
    from riftco.errors import DTypeError

    with pytest.raises(DTypeError, match="float64"):
        metal.from_numpy(np.ones(3))


@needs_cl
def test_standin_env_makes_backend_available(monkeypatch):
    from riftco.backends.metal.backend import MetalBackend

    monkeypatch.setenv("RIFTCO_METAL_STANDIN", "1")
    monkeypatch.setenv("RIFTCO_METAL_RUNTIME", "metalcompute")
    ok, reason = MetalBackend.is_available()
    assert ok, reason
    assert MetalBackend.devices()[0].details["runtime"] == "stand-in (OpenCL)"
    backend = MetalBackend(0)
    t = backend.from_numpy(np.array([1.0, 4.0, 9.0], dtype=np.float32))
    np.testing.assert_array_equal(backend.sqrt(t).numpy(), [1.0, 2.0, 3.0])


@needs_cl
def test_standin_waits_before_host_reads(metal):
    """A download right after many queued launches sees all of them (handles waited)."""
    import riftco.ops as ops

    x = metal.from_numpy(np.zeros(5000, dtype=np.float32))
    for _ in range(50):
        x = ops.add_scalar(x, 1.0)
    np.testing.assert_array_equal(x.numpy(), np.full(5000, 50.0, dtype=np.float32))
    assert metal.transfer_stats()["downloads"] >= 1
