"""A stricter MSL check than g++: Metal's address spaces kept distinct, limits checked.

The g++ syntax check (tests/backends/metal/test_metal_backend.py) erases ``device``,
``threadgroup`` and ``constant`` (the stub defines them empty), so a kernel that hands a
device pointer to a helper expecting threadgroup memory passes there and fails only in
Apple's compiler. Here every program the Metal backend builds (recorded from a workload on
the objc runtime's fake, so the ``T=int`` and ``SRC=float`` expansions are in, and the
float16 / bfloat16 ones) is compiled
by clang as C++ for OpenCL with the stub's qualifiers mapped to OpenCL's distinct address
spaces (``device`` -> ``__global``, ``threadgroup`` -> ``__local``, ``constant`` ->
``__constant``), which C++ for OpenCL refuses to mix. From the preprocessed programs it
also checks Metal's limits: each kernel's threadgroup arrays fit in 32 KiB, and its
``[[buffer(n)]]`` indices are its parameter positions 0, 1, ... and at most 31 of them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from riftco.dtypes import LOW_PRECISION
from riftco.kernel_host.sources import program_source

CLANG = shutil.which("clang") or shutil.which("clang-14") or shutil.which("clang-15")
needs_clang = pytest.mark.skipif(
    CLANG is None,
    reason="clang is not installed (apt-get install clang): the strict check needs it",
)
#: Metal's threadgroup memory limit on every Apple GPU riftco targets.
THREADGROUP_LIMIT = 32 * 1024
FLAGS = ["-x", "clcpp", "-cl-std=clc++", "-cl-no-stdinc", "-fno-builtin",
         "-Wno-unknown-attributes", "-D__METAL_VERSION__=230"]  # fmt: skip
ProgramKey = tuple[str, str, str, tuple[tuple[str, str], ...]]
SIZES = {"float": 4, "int": 4, "uint": 4, "unsigned": 4, "long": 8, "double": 8, "short": 2,
         "char": 1, "uchar": 1, "bool": 1}  # fmt: skip


@pytest.fixture(scope="module")
def strict_stub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """shaders/stubs/metal_stdlib with distinct address spaces (OpenCL's, which C++ for
    OpenCL type-checks), and its ``atomic_int`` renamed off OpenCL's builtin one."""
    text = resources.files("riftco.shaders").joinpath("stubs/metal_stdlib").read_text()
    mapping = {"kernel": "__kernel", "device": "__global", "threadgroup": "__local",
               "constant": "__constant"}  # fmt: skip
    for word, space in mapping.items():
        text, n = re.subn(rf"^#define {word}$", f"#define {word} {space}", text, flags=re.M)
        assert n == 1, f"the stub no longer defines {word} on its own line"
    folder = tmp_path_factory.mktemp("strict_stub")
    (folder / "metal_stdlib").write_text("#define atomic_int riftco_msl_atomic_int\n" + text)
    return folder


def _built_programs(monkeypatch: pytest.MonkeyPatch) -> list[ProgramKey]:
    """Every program the Metal backend builds for the primitive cases and a training step in
    each attention mode, on the objc runtime's fake (needs the ``registry`` fixture)."""
    import riftco
    from _gpu_cases import CASES
    from riftco import plugins
    from riftco.backends.opencl import runtime as clrt
    from riftco.nn import GPT, GPTConfig
    from riftco.train.data import CharDataset, load_text
    from riftco.train.loop import TrainConfig, Trainer

    devices, why = clrt.enumerate_devices()
    if not devices:
        pytest.skip(f"the fake records the built programs on OpenCL: {why}")
    monkeypatch.setenv("RIFTCO_METAL_STANDIN", "1")
    monkeypatch.setenv("RIFTCO_METAL_RUNTIME", "objc")
    plugins.reset_registry()
    dev = riftco.device("metal")
    backend = dev.backend
    for case in CASES.values():
        case(backend, np.random.default_rng(0), np.dtype(np.float32))
    for half in LOW_PRECISION:  # half storage: copies, fill, casts, elementwise, softmax
        h = backend.cast(backend.from_numpy(np.ones((4, 8), np.float32)), half)
        backend.fill(h, 0.5)
        sums = backend.binary("add", backend.copy_strided(h.permute(1, 0)), h.T)
        backend.cast(backend.softmax_backward(sums, backend.softmax(sums)), np.float32)
    text, source = load_text(None)
    data = CharDataset.from_text(text[:5_000], 8, source)
    for attention in ("materialized", "flash"):
        cfg = GPTConfig(vocab=data.tokenizer.vocab_size, context=8, layers=1, heads=2,
                        width=16, attention=attention)  # fmt: skip
        trainer = Trainer(GPT(cfg, device=dev, seed=0), data, TrainConfig(steps=1, batch_size=2))
        trainer.train_step()
    return sorted(
        (family, np.dtype(dt).name, np.dtype(idx).name, defines)
        for family, dt, idx, defines in backend._programs
    )


def _source(key: ProgramKey) -> str:
    family, dtype, index, defines = key
    return program_source(family, np.dtype(dtype), np.dtype(index), dict(defines))


def _clang(path: Path, stub: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLANG, *FLAGS, "-I", str(stub), *extra, str(path)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


@needs_clang
def test_every_built_program_passes_the_strict_check(registry, monkeypatch, strict_stub, tmp_path):
    """Address spaces kept apart, threadgroup memory within 32 KiB, buffer indices equal to
    parameter positions and at most 31, for every program built, ``T=int`` and
    ``SRC=float`` expansions included."""
    programs = _built_programs(monkeypatch)
    kinds = {(k[0], k[1], dict(k[3]).get("SRC")) for k in programs}
    # T=int with SRC=float (float to int) and T=float with SRC=int: the backend's expansions
    assert ("cast", "int32", "float") in kinds and ("cast", "float32", "int") in kinds
    assert ("cast", "float16", "float") in kinds and ("cast", "float32", "ushort") in kinds
    assert ("elementwise", "float16", None) in kinds and ("copy", "float16", None) in kinds
    assert ("softmax", "bfloat16", None) in kinds
    assert {"attention", "layer_norm", "matmul"} <= {k[0] for k in programs}
    problems = []
    for key in programs:
        path = tmp_path / f"{key[0]}.clcpp"
        path.write_text(_source(key))
        proc = _clang(path, strict_stub, "-fsyntax-only")
        if proc.returncode:
            problems.append(f"{key} mixes Metal address spaces:\n{proc.stderr[:2000]}")
            continue
        pre = _clang(path, strict_stub, "-E", "-P").stdout
        ast = _clang(path, strict_stub, "-fsyntax-only", "-Xclang", "-ast-dump").stdout
        problems += [f"{key}: {p}" for p in _limit_problems(pre, ast)]
    assert not problems, "\n".join(problems)


@needs_clang
def test_strict_check_catches_what_gxx_erases(strict_stub, tmp_path):
    """Must be able to fail: a device pointer handed to a threadgroup parameter."""
    bad = program_source("copy", np.dtype(np.float32)) + (
        "\nINLINE T first(LOCAL_PTR T* p) { return p[0]; }\n"
        "KERNEL void mixes(GLOBAL T* out ARG(0) THREAD_ARGS) { out[GID] = first(out); }\n"
    )
    path = tmp_path / "bad.clcpp"
    path.write_text(bad)
    proc = _clang(path, strict_stub, "-fsyntax-only")
    assert proc.returncode != 0 and "__local" in proc.stderr and "__global" in proc.stderr
    gxx = shutil.which("g++")
    if gxx:  # the g++ stub erases the qualifiers: it accepts the same source
        stubs = resources.files("riftco.shaders").joinpath("stubs")
        ok = subprocess.run([gxx, "-std=c++17", "-fsyntax-only", "-Wno-attributes",
                             "-D__METAL_VERSION__=300", "-I", str(stubs), "-x", "c++", str(path)],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
        assert ok.returncode == 0, ok.stderr


def _kernels(preprocessed: str) -> list[tuple[str, str]]:
    """(name, parameter text) of each ``__kernel`` function."""
    out = []
    for m in re.finditer(r"__kernel\s+void\s+(\w+)\s*\(", preprocessed):
        i, depth = m.end(), 1
        while depth:
            depth += {"(": 1, ")": -1}.get(preprocessed[i], 0)
            i += 1
        out.append((m.group(1), preprocessed[m.end() : i - 1]))
    return out


def _split_params(params: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in params:
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [*parts, cur]


_FUNCTION = re.compile(r"^[|`]-FunctionDecl .* (\w+) '[^']*'")
_LOCAL_ARRAY = re.compile(r"-VarDecl .* (\w+) '__local ((?:unsigned )?\w+)((?:\[\d+\])+)'")


def _threadgroup_bytes(ast_dump: str) -> dict[str, int]:
    """Threadgroup bytes declared per function, from clang's AST dump (sizes evaluated by
    clang, whatever expression the source wrote)."""
    used: dict[str, int] = {}
    current = ""
    for line in ast_dump.splitlines():
        m = _FUNCTION.match(line)
        if m:
            current = m.group(1)
            continue
        m = _LOCAL_ARRAY.search(line)
        if m:
            count = 1
            for dim in re.findall(r"\d+", m.group(3)):
                count *= int(dim)
            used[current] = used.get(current, 0) + SIZES[m.group(2).split()[-1]] * count
    return used


def _limit_problems(preprocessed: str, ast_dump: str) -> list[str]:
    kernels = _kernels(preprocessed)
    tg = _threadgroup_bytes(ast_dump)
    if not kernels:
        return ["no kernels found"]
    problems = []
    for name, params in kernels:
        parts = _split_params(params)
        indices = [int(m.group(1)) for p in parts
                   for m in [re.search(r"\[\[\s*buffer\((\d+)\)\s*\]\]", p)] if m]  # fmt: skip
        positions = [i for i, p in enumerate(parts) if "buffer(" in p]
        if not indices == positions == list(range(len(indices))):
            problems.append(f"{name}: buffer indices {indices} at positions {positions}")
        if len(indices) > 31:
            problems.append(f"{name} binds {len(indices)} buffers (Metal: 31)")
        used = tg.get(name, 0)
        if used > THREADGROUP_LIMIT:
            problems.append(f"{name}: {used} bytes of threadgroup memory (Metal: 32 KiB)")
    return problems


def test_limit_check_sees_violations():
    """The limits above must be able to fail: too much threadgroup memory, a skipped index."""
    dump = ("|-FunctionDecl 0x1 <a.cpp:1:1> line:1:6 k 'void (__global float *)'\n"
            "| | `-VarDecl 0x2 <line:2:3> col:9 big '__local float[8193]'\n"
            "| | `-VarDecl 0x3 <line:3:3> col:9 rows '__local int[2][4]'\n")  # fmt: skip
    assert _threadgroup_bytes(dump) == {"k": 4 * 8193 + 4 * 8}
    problems = _limit_problems(
        "__kernel void k(__global float* x [[buffer(0)]], __global int* p [[buffer(2)]], "
        "uint g [[thread_position_in_grid]]) { }",
        dump,
    )
    assert problems == ["k: buffer indices [0, 2] at positions [0, 1]",
                        "k: 32804 bytes of threadgroup memory (Metal: 32 KiB)"]  # fmt: skip
