"""Kernel builds that succeed are silent, on every OpenCL device present.

pyopencl turns a non-empty build log into a ``CompilerWarning`` and PoCL prints clang's
"N warnings generated." to stderr: on a CPU whose vector ABI differs (the pip PoCL on an
AVX2-only AMD EPYC warned "AVX vector return of type 'double8' without 'avx512f' enabled
changes the ABI" for the CPU flash kernels) that failed ``make test`` for every newcomer.
Each family is built here in both float dtypes, with and without Metal's fast math, and
must raise no warning, print nothing and leave no diagnostic outside ``HARMLESS`` in its
build log. The capture and the classification are checked on their own too.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from riftco.kernel_host.build_log import HARMLESS, BuildLog, capture_compiler_output
from riftco.kernel_host.sources import families, program_source

clrt = pytest.importorskip("riftco.backends.opencl.runtime")
_DEVICES, _WHY = clrt.enumerate_devices()
needs_opencl = pytest.mark.skipif(not _DEVICES, reason=f"no OpenCL device: {_WHY}")
#: The cast family converts from SRC: one program per pair; two stand for them here.
_SRC = {"float32": "int", "float64": "float"}
_CASES = [
    (index, family, dtype, fast)
    for index in range(len(_DEVICES))
    for family in families()
    for dtype in ("float32", "float64")
    for fast in (False, True)
    if dtype == "float32" or clrt.has_fp64(_DEVICES[index])
]


@needs_opencl
@pytest.mark.parametrize(
    "index,family,dtype,fast",
    _CASES,
    ids=[f"opencl:{i}-{f}-{d}" + ("-fastmath" if m else "") for i, f, d, m in _CASES],
)
def test_successful_build_is_silent(index, family, dtype, fast, capfd):
    runtime = clrt.OpenCLRuntime(index, fast_math=fast)
    defines = {"SRC": _SRC[dtype]} if family == "cast" else None
    source = program_source(family, np.dtype(dtype), None, defines)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = runtime.compile(source, f"{family}.cl [{dtype}]")
    out, err = capfd.readouterr()
    assert not caught, f"{family} [{dtype}] warned: {[str(w.message) for w in caught]}"
    assert not out and not err, f"{family} [{dtype}] printed: {out!r} {err!r}"
    assert program.build_log.notable == [], (
        f"{family} [{dtype}] on {runtime.device_name}: the compiler said\n"
        + "\n".join(program.build_log.notable)
    )


def test_capture_takes_fd2_and_warnings_into_the_log(capfd):
    said: list[str] = []
    with capture_compiler_output(said, duplicates=(UserWarning,)):
        os.write(2, b"3 warnings generated.\n")  # what PoCL's clang prints, below Python
        warnings.warn("dropped: it only announces a log", UserWarning, stacklevel=1)
        warnings.warn("kept", RuntimeWarning, stacklevel=1)
    _, err = capfd.readouterr()
    assert err == ""
    assert said[0] == "3 warnings generated."
    assert said[1:] == ["kept"]
    os.write(2, b"after\n")  # the descriptor is restored
    assert capfd.readouterr().err == "after\n"


def test_capture_restores_fd2_when_the_build_raises(capfd):
    said: list[str] = []
    with pytest.raises(ValueError), capture_compiler_output(said):
        os.write(2, b"error: broken\n")
        raise ValueError("build failed")
    assert said == ["error: broken"]
    os.write(2, b"visible\n")
    assert capfd.readouterr().err == "visible\n"


def test_build_log_classifies_lines():
    text = (
        "warning: k.cl:3:1: AVX vector return of type 'double8' (vector of 8 'double' values)"
        " without 'avx512f' enabled changes the ABI\n"
        "k.cl:9:5: warning: unused variable 'x'\n"
        "some banner without a diagnostic\n"
        "2 warnings generated.\n"
    )
    log = BuildLog.parse(text, "k.cl")
    assert log.notable == ["k.cl:9:5: warning: unused variable 'x'"]
    harmless = [d for d in log.diagnostics if d.harmless]
    assert len(harmless) == 2 and all(d.harmless in dict(HARMLESS).values() for d in harmless)
    assert log.summary() == "1 notable, 2 known harmless"
    assert BuildLog.parse("  \n").summary() == "clean"
    assert BuildLog.parse("error: x.cl:1: expected ';'").notable == ["error: x.cl:1: expected ';'"]


def test_captures_nest(capfd):
    """The Metal stand-in's build captures around the OpenCL runtime's own capture."""
    outer: list[str] = []
    inner: list[str] = []
    with capture_compiler_output(outer):
        with capture_compiler_output(inner):
            os.write(2, b"inner\n")
        os.write(2, b"outer\n")
    assert inner == ["inner"] and outer == ["outer"]
    assert capfd.readouterr().err == ""


@needs_opencl
def test_backends_verbose_lists_programs_with_their_logs(tmp_path, monkeypatch, capsys, registry):
    from riftco.cli import main
    from riftco.kernel_host.cache import KernelCache

    monkeypatch.setenv("RIFTCO_CACHE_DIR", str(tmp_path))  # before the fresh registry lists
    runtime = clrt.OpenCLRuntime(0)
    # a source no earlier test built in this process (the in-process table would answer)
    source = program_source("gelu", np.dtype(np.float32)) + f"\n/* {tmp_path.name} */\n"
    runtime.compile(source, "gelu.cl [float32]")
    # an entry whose compiler talked: one harmless line, one that is not
    cache = clrt.kernel_cache(runtime.device)
    assert isinstance(cache, KernelCache)
    said = "k.cl:9:5: warning: unused variable 'x'\n1 warning generated."
    cache.store(cache.key("other", []), b"", said, "other.cl [float32]", [])
    assert main(["backends", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert f"kernel cache: {cache.folder} (2 programs)" in out
    assert f"gelu.cl [float32] on {runtime.device_name}: clean" in out
    assert "other.cl [float32]: 1 notable, 1 known harmless" in out
    assert "! k.cl:9:5: warning: unused variable 'x'" in out
    assert "~ 1 warning generated.  [harmless: clang's count" in out
    assert main(["backends"]) == 0
    assert "kernel cache" not in capsys.readouterr().out  # only with --verbose


@needs_opencl
def test_failed_build_raises_with_the_log(capfd):
    from riftco.errors import KernelCompileError

    runtime = clrt.OpenCLRuntime(0)
    with pytest.raises(KernelCompileError, match=r"(?s)broken\.cl on .*undeclared"):
        runtime.compile("__kernel void k(__global float* x) { x[0] = y; }\n", "broken.cl")
    assert capfd.readouterr().err == ""
