"""The Metal expansion of the float16 / bfloat16 programs passes the MSL syntax check.

Every half program the kernel host builds (copies and fill, elementwise and softmax in half storage,
each cast to or from a half; Metal has no float64) is checked with g++ against
shaders/stubs/metal_stdlib, with MSL's ``half`` conversions (the Metal branch of half.h)
and with the bit-level ones (``RIFTCO_HALF_BITS``), at MSL 2.3, the version the objc
runtime asks for. Apple's ``bfloat`` needs MSL 3.1, so bfloat16 is bit level on Metal; a
kernel naming ``bfloat`` must fail here (the stub, like MSL 2.3, declares none). The
strict address-space check (test_metal_msl_strict.py) sees these programs through the
backend's own workload.
"""

from __future__ import annotations

import shutil
import subprocess
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from riftco.kernel_host.half_storage import (
    HALF_COMPUTE_FAMILIES,
    HALF_NAMES,
    cast_defines,
)
from riftco.kernel_host.sources import c_type, program_source

GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(
    GXX is None, reason="g++ is not installed: the MSL syntax check needs it"
)
_FLOATS = [*HALF_NAMES, np.dtype(np.float32)]
#: (family, dtype, defines) of every half program a Metal backend builds: copies and
#: fill, the families in half storage (float compute), each cast, and the float32 GELU
#: backwards that read a half x (core/kernel_host/half_linear.py).
PROGRAMS = (
    [(f, h, {}) for f in ("copy", *sorted(HALF_COMPUTE_FAMILIES)) for h in HALF_NAMES]
    + [
        ("cast", dst, {"SRC": c_type(src), **cast_defines(src, dst)})
        for src in _FLOATS
        for dst in _FLOATS
        if src != dst and (src in HALF_NAMES or dst in HALF_NAMES)
    ]
    + [
        (
            "gelu",
            np.dtype(np.float32),
            {"GELU_X_WIDEN": cast_defines(h, np.dtype(np.float32))["CAST_WIDEN"]},
        )
        for h in HALF_NAMES
    ]
)


def _gxx(source: str, path: Path) -> subprocess.CompletedProcess[str]:
    stubs = resources.files("riftco.shaders").joinpath("stubs")
    path.write_text(source)
    cmd = [GXX, "-std=c++17", "-fsyntax-only", "-Wno-attributes", "-D__METAL_VERSION__=230",
           "-I", str(stubs), "-x", "c++", str(path)]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("bits", [False, True], ids=["msl-half", "bit-level"])
@pytest.mark.parametrize(
    "family,dtype,defines",
    PROGRAMS,
    ids=[
        f"{f}-{d}" + (f"-{x.get('CAST_WIDEN', x.get('SRC'))}" if x else "") for f, d, x in PROGRAMS
    ],
)
def test_half_program_passes_the_metal_syntax_check(family, dtype, defines, bits, tmp_path):
    extra = {"RIFTCO_HALF_BITS": "1"} if bits else {}
    src = program_source(family, dtype, None, {**defines, **extra})
    proc = _gxx(src, tmp_path / f"{family}.metal.cpp")
    assert proc.returncode == 0, f"{family} [{dtype}] under the Metal prelude:\n{proc.stderr}"


def test_the_check_refuses_bfloat_at_msl_2_3(tmp_path):
    """Must be able to fail: MSL's ``bfloat`` type does not exist before 3.1."""
    src = program_source("copy", np.dtype(np.float16)) + (
        "\nKERNEL void widen(GLOBAL float* out ARG(0), GLOBAL const bfloat* x ARG(1) "
        "THREAD_ARGS) { out[GID] = float(x[GID]); }\n"
    )
    proc = _gxx(src, tmp_path / "bfloat.metal.cpp")
    assert proc.returncode != 0 and "bfloat" in proc.stderr
