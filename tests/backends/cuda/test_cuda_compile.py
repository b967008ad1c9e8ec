"""NVIDIA's own compiler checks every kernel family, on any machine (no GPU or driver needed).

NVRTC (from the ``nvidia-cuda-nvrtc`` wheel of the test extra) compiles the exact string
the CUDA runtime builds, prelude's CUDA branch included, to a CUBIN for sm_90 (Hopper: the
H200 the project's device checks run on), in float32 and float64. The CUBIN must be a CUDA
ELF whose symbol table holds each kernel under its plain (``extern "C"``) name, which is
how the runtime looks kernels up. A second test makes sure the check can fail on code that
the other dialects accept, and a third that every macro the Metal and OpenCL branches of
the prelude define has a CUDA spelling.
"""

from __future__ import annotations

import platform
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
from riftco.errors import KernelCompileError
from riftco.kernel_host.half_storage import (
    HALF_COMPUTE_FAMILIES,
    HALF_NAMES,
    cast_defines,
)
from riftco.kernel_host.sources import c_type, families, program_source, shader_text

compiler = pytest.importorskip("riftco.backends.cuda.compiler")

ARCH = "sm_90"
#: The test extra installs NVRTC on Linux x86-64: there a missing NVRTC is a failure.
_NVRTC_REQUIRED = sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")
_WHY = compiler.nvrtc_status()
needs_nvrtc = pytest.mark.skipif(
    bool(_WHY) and not _NVRTC_REQUIRED, reason=f"NVRTC is not installed here: {_WHY}"
)


@pytest.fixture(autouse=True)
def _always_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVRTC itself must see every source on every run: a CUBIN from the kernel cache
    would let a machine that compiled the family once stand in for this check."""
    monkeypatch.setenv("RIFTCO_KERNEL_CACHE", "0")


#: (family, dtype, index dtype, defines): every program the host may build, in both dtypes.
_VARIANTS = [(f, "float32", "int32", None) for f in families()]
_VARIANTS += [(f, "float64", "int64", None) for f in families()]
_VARIANTS += [
    ("cast", dst, "int32", {"SRC": src})
    for dst, src in [
        ("float32", "double"),
        ("float64", "float"),
        ("int32", "float"),
        ("int64", "double"),
        ("float32", "long"),
        ("float64", "int"),
    ]
]
_VARIANTS = [v for v in _VARIANTS if not (v[0] == "cast" and v[3] is None)]
#: float16 / bfloat16 (shaders/half.h, bit level on CUDA): copies and fill, the families
#: in half storage, and every cast to or from a half (the dtypes themselves: bfloat16 has no
#: name numpy knows alone).
_FLOATS = [*HALF_NAMES, np.dtype(np.float32), np.dtype(np.float64)]
_VARIANTS += [
    (f, h, "int32", None) for f in ("copy", *sorted(HALF_COMPUTE_FAMILIES)) for h in HALF_NAMES
]
_VARIANTS += [  # the float32 GELU backwards reading a half x (core/kernel_host/half_linear.py)
    (
        "gelu",
        "float32",
        "int32",
        {"GELU_X_WIDEN": cast_defines(h, np.dtype(np.float32))["CAST_WIDEN"]},
    )
    for h in HALF_NAMES
]
_VARIANTS += [
    ("cast", dst, "int32", {"SRC": c_type(src), **cast_defines(src, dst)})
    for src in _FLOATS
    for dst in _FLOATS
    if src != dst and (src in HALF_NAMES or dst in HALF_NAMES)
]


def elf_functions(blob: bytes) -> set[str]:
    """Names of the FUNC symbols in an ELF64 little-endian object (a CUBIN)."""
    assert blob[:4] == b"\x7fELF" and blob[4] == 2 and blob[5] == 1, "not an ELF64 LE image"
    (machine,) = struct.unpack_from("<H", blob, 18)
    assert machine == 190, f"e_machine {machine} is not EM_CUDA (190)"
    (shoff,) = struct.unpack_from("<Q", blob, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", blob, 0x3A)
    sections = [
        struct.unpack_from("<IIQQQQIIQQ", blob, shoff + i * shentsize) for i in range(shnum)
    ]
    names: set[str] = set()
    for sh in sections:
        if sh[1] != 2:  # SHT_SYMTAB
            continue
        strtab = sections[sh[6]]
        str_off = strtab[4]
        for j in range(sh[5] // sh[9]):
            st_name, st_info = struct.unpack_from("<IB", blob, sh[4] + j * sh[9])
            if st_info & 0xF == 2:  # STT_FUNC
                end = blob.index(b"\0", str_off + st_name)
                names.add(blob[str_off + st_name : end].decode())
    return names


def _literal_kernels(family: str) -> set[str]:
    """Kernels named literally in the file (macro bodies, lines ending in a backslash, name
    their parameters instead)."""
    lines = [
        ln for ln in shader_text(f"{family}.cl").splitlines() if not ln.rstrip().endswith("\\")
    ]
    return set(re.findall(r"KERNEL\s+void\s+(\w+)\s*\(", "\n".join(lines)))


@needs_nvrtc
@pytest.mark.parametrize(
    "family,dtype,index,defines",
    _VARIANTS,
    ids=[
        f"{f}-{d}"
        + (f"-from-{x.get('CAST_WIDEN') or x.get('GELU_X_WIDEN') or x['SRC']}" if x else "")
        for f, d, _, x in _VARIANTS
    ],
)
def test_nvrtc_compiles_family(family, dtype, index, defines):
    src = program_source(family, np.dtype(dtype), np.dtype(index), defines)
    cubin, log = compiler.build(src, f"{family}.cl [{dtype}]", ARCH)
    assert log.notable == [], f"{family} [{dtype}]: NVRTC said\n" + "\n".join(log.notable)
    functions = elf_functions(cubin)
    missing = _literal_kernels(family) - functions
    assert not missing, (
        f"{family}: kernels {sorted(missing)} not in the CUBIN ({sorted(functions)})"
    )
    assert functions, f"{family}: the CUBIN holds no kernel"


@needs_nvrtc
def test_macro_generated_kernels_keep_plain_names():
    cubin = compiler.compile_cubin(program_source("elementwise", np.float32), "ew", ARCH)
    names = elf_functions(cubin)
    assert {"unary_tanh", "binary_add", "cmp_lt", "where_select"} <= names, sorted(names)
    assert not [n for n in names if n.startswith("_Z")], "C++-mangled kernel names"


@needs_nvrtc
def test_check_catches_cuda_only_errors():
    """Valid OpenCL (a __local pointer parameter) that CUDA refuses: the check must fail."""
    bad = program_source("copy", np.float32) + (
        "\nINLINE T first(LOCAL T* p) { return p[0]; }\n"
        "KERNEL void uses_local_param(GLOBAL T* out ARG(0) THREAD_ARGS) {\n"
        "    LOCAL T tile[32];\n    tile[LID % 32] = out[GID];\n    BARRIER();\n"
        "    out[GID] = first(tile);\n}\n"
    )
    with pytest.raises(KernelCompileError, match=r"(?s)bad\.cl.*failed to build.*__shared__"):
        compiler.compile_cubin(bad, "bad.cl", ARCH)


def test_options_target_machine_code_only():
    assert compiler.compile_options("sm_90")[0] == "-arch=sm_90"
    assert compiler.arch_for((9, 0)) == "sm_90" and compiler.arch_for((12, 1)) == "sm_121"
    with pytest.raises(KernelCompileError, match="never PTX"):
        compiler.compile_options("compute_90")


@needs_nvrtc
def test_nvrtc_targets_hopper():
    assert 90 in compiler.supported_archs()
    assert compiler.nvrtc_version()[0] >= 12


# -- the prelude: every macro of the Metal and OpenCL branches has a CUDA spelling ----------
_DIRECTIVE = re.compile(r"^\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)$")
_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)")


def _dialect_chains(text: str) -> list[dict[str, set[str]]]:
    """For each #if chain that starts on __METAL_VERSION__: the macros each dialect's
    branch defines (nested conditionals included), keyed metal / opencl / cuda."""
    chains: list[dict[str, set[str]]] = []
    stack: list[dict | None] = []  # per open #if: the chain being read, or None
    for line in text.splitlines():
        m = _DIRECTIVE.match(line)
        if m:
            kind, rest = m.groups()
            if kind.startswith("if"):
                if "__METAL_VERSION__" in rest and not [s for s in stack if s]:
                    chain = {
                        "branch": "metal",
                        "defs": {"metal": set(), "opencl": set(), "cuda": set()},
                    }
                    stack.append(chain)
                    chains.append(chain["defs"])
                else:
                    stack.append(None)
            elif kind in ("elif", "else") and stack and stack[-1] is not None:
                chain = stack[-1]
                if "__OPENCL_VERSION__" in rest:
                    chain["branch"] = "opencl"
                elif "__CUDACC" in rest or kind == "else":
                    chain["branch"] = "cuda"
            elif kind == "endif" and stack:
                stack.pop()
            continue
        d = _DEFINE.match(line)
        active = [s for s in stack if s]
        if d and active:
            active[0]["defs"][active[0]["branch"]].add(d.group(1))
    return chains


def test_every_prelude_macro_has_a_cuda_spelling():
    chains = _dialect_chains(shader_text("prelude.h"))
    assert chains, "prelude.h has no __METAL_VERSION__ chain"
    for defs in chains:
        missing = (defs["metal"] | defs["opencl"]) - defs["cuda"]
        assert not missing, f"prelude.h: {sorted(missing)} have no CUDA branch definition"
    assert {"KERNEL", "LOCAL", "LOCAL_PTR", "BARRIER", "GID"} <= chains[0]["cuda"]


def test_parity_check_can_fail():
    text = (
        "#if defined(__METAL_VERSION__)\n#define A 1\n#define ONLY_METAL 2\n"
        "#elif defined(__OPENCL_VERSION__)\n#define A 1\n#if defined(X)\n#define NESTED 3\n#endif\n"
        "#else\n#define A 1\n#endif\n"
    )
    (defs,) = _dialect_chains(text)
    assert (defs["metal"] | defs["opencl"]) - defs["cuda"] == {"ONLY_METAL", "NESTED"}


@pytest.mark.skipif(not shutil.which("cc"), reason="no C compiler to run the index macros")
def test_cuda_global_index_is_64_bit_and_saturates(tmp_path):
    """The CUDA branch's GID and GLOBAL_SIZE, evaluated as written (block and thread ids as
    the unsigned ints CUDA has): near 2^31 elements at a block of 96 the last block's
    threads pass 2^31, where 32-bit arithmetic made a negative index that slips past an
    `i < n` test; saturated they read INT_MAX."""
    cuda_branch = shader_text("prelude.h").split("#elif defined(__CUDACC_RTC__)", 1)[1]
    macros = [
        line
        for line in cuda_branch.splitlines()
        if re.match(r"#define (RS_SAT_INT|GID|GLOBAL_SIZE)\b", line)
    ]
    assert len(macros) == 3, macros
    n = 2**31 - 10  # fewer elements than INT_MAX: a legal tensor
    blocks = -(-n // 96)
    src = "\n".join(
        [
            "#include <stdio.h>",
            "struct u3 { unsigned int x; };",
            f"struct u3 blockIdx = {{{blocks - 1}u}}, blockDim = {{96u}}, threadIdx = {{95u}};",
            f"struct u3 gridDim = {{{blocks}u}};",
            *macros,
            'int main(void) { printf("%d %d\\n", GID, GLOBAL_SIZE); return 0; }',
        ]
    )
    (tmp_path / "gid.c").write_text(src)
    subprocess.run(["cc", "-o", str(tmp_path / "gid"), str(tmp_path / "gid.c")], check=True)
    out = subprocess.run([str(tmp_path / "gid")], capture_output=True, text=True, check=True)
    gid, size = map(int, out.stdout.split())
    assert (blocks - 1) * 96 + 95 >= 2**31  # the case the old 32-bit form got wrong
    assert gid == 2**31 - 1 and gid >= n
    assert size == 2**31 - 1
