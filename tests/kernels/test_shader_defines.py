"""The numbers launch plans and shaders share come from one definition (shader_defines.py).

The host passes each as a ``#define`` to every program; these tests fail when a shader
defines one itself (a hand-kept copy that could drift), hard-codes an index into the flash
kernels' row layout instead of naming it, uses a host name the host does not define, or
when the host's flash parameters stop matching the layout the shaders index through.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from importlib import resources
from typing import Any

import numpy as np
import pytest
from riftco.kernel_host.fused_flash_attention import FlashAttentionPlan
from riftco.kernel_host.runtime import RuntimeCapabilities
from riftco.kernel_host.shader_defines import (
    FLASH_LAYOUT_AT,
    FlashRows,
    dense_rows,
    qkv_rows,
    shader_defines,
)
from riftco.kernel_host.sources import families, program_source

#: Shader-local names that stand for a host number: each must be defined through one.
_ALIASES = {"FC_R", "FA_BQ", "FB_BR", "RADIX_BINS"}
_FLASH_FILES = ("flash_attention.cl", "flash_attention_cpu.cl", "flash_rows.h")


def _shaders() -> dict[str, str]:
    root = resources.files("riftco.shaders")
    return {
        p.name: p.read_text(encoding="utf-8")
        for p in root.iterdir()
        if p.name.endswith((".cl", ".h"))
    }


def _code(text: str) -> str:
    """``text`` without its comments (which may describe indices and name patterns)."""
    return re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)


def _defines(text: str) -> dict[str, str]:
    """``#define NAME body`` of a shader (body up to the end of the line)."""
    pattern = r"^[ \t]*#[ \t]*define[ \t]+(\w+)(?:\([^)]*\))?[ \t]*(.*)$"
    return {m.group(1): m.group(2) for m in re.finditer(pattern, text, re.M)}


def test_no_shader_defines_a_host_number() -> None:
    host = set(shader_defines())
    for name, text in _shaders().items():
        again = host & set(_defines(text))
        assert not again, f"shaders/{name} defines {sorted(again)}, which the host defines"


def test_aliases_of_host_numbers_are_defined_through_them() -> None:
    host = set(shader_defines())
    found = set()
    for name, text in _shaders().items():
        for alias, body in _defines(text).items():
            if alias in _ALIASES:
                found.add(alias)
                used = set(re.findall(r"\b[A-Z_][A-Z0-9_]*\b", body)) & host
                assert used, f"shaders/{name}: {alias} = {body!r} names no host define"
    assert found == _ALIASES


def test_every_host_name_a_shader_uses_is_defined_by_the_host() -> None:
    host = set(shader_defines())
    for name, text in _shaders().items():
        used = set(re.findall(r"\b(?:FLASH_[A-Z0-9_]+|RADIX_BITS)\b", _code(text)))
        assert used <= host, f"shaders/{name} uses {sorted(used - host)}, not defined by the host"


@pytest.mark.parametrize("filename", _FLASH_FILES)
def test_flash_row_layout_is_indexed_by_name(filename: str) -> None:
    """P[0..3] are BH, T, D, causal; everything from FLASH_LAYOUT_AT on goes by name."""
    code = _code(_shaders()[filename])
    literal = [int(i) for i in re.findall(r"\bP\[\s*(\d+)\s*\]", code)]
    assert all(i < FLASH_LAYOUT_AT for i in literal), f"{filename} indexes P by number"
    assert not re.search(r"fa_rows\(\s*P\s*,\s*\d", code), f"{filename}: fa_rows(P, <number>"


def test_flash_layout_fields_and_strides() -> None:
    defines = shader_defines()
    fields = FlashRows._fields
    for i, field in enumerate(fields):
        assert defines[f"FLASH_P_{field.upper()}"] == FLASH_LAYOUT_AT + i
    for first in ("batch_stride", "out_batch_stride"):  # fa_rows reads the triple in a row
        at = fields.index(first)
        assert fields[at + 1 : at + 3] == (
            first.replace("batch", "head"),
            first.replace("batch", "row"),
        )
    assert len(dense_rows(5, 3)) == len(qkv_rows(5, 12, 4)) == len(fields)


class _Tensor:
    def __init__(self, shape: Sequence[int], dtype: Any) -> None:
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.size = math.prod(self.shape)


class _Runtime:
    capabilities = RuntimeCapabilities(
        is_cpu=False, serial_rows=False, group_size_hint=64, matmul_wide_min_tiles=math.inf
    )


class _Recorder(FlashAttentionPlan):
    """Records the flash launches' integer parameters; runs nothing."""

    def __init__(self) -> None:
        self.runtime = _Runtime()
        self.ints: list[tuple[str, tuple[int, ...]]] = []

    def empty(self, shape: Sequence[int], dtype: Any) -> _Tensor:
        return _Tensor(shape, dtype)

    def launch(self, family: str, kernel: str, *args: Any, ints: Sequence[int] = (), **kw: Any):
        self.ints.append((kernel, tuple(ints)))


def test_flash_launch_parameters_match_the_layout() -> None:
    host = _Recorder()
    b, h, t, d = 2, 3, 5, 8
    q = _Tensor((b, h, t, d), np.float32)
    host.flash_attention(q, q, q, 0.5, True)
    host.flash_attention_backward(q, q, q, q, q, _Tensor((b, h, t), np.float32), 0.5, True)
    assert len(host.ints) == 4
    for kernel, ints in host.ints:
        assert len(ints) == FLASH_LAYOUT_AT + len(FlashRows._fields), kernel
        assert ints[:FLASH_LAYOUT_AT] == (b * h, t, d, 1), kernel
        assert FlashRows(*ints[FLASH_LAYOUT_AT:]) == dense_rows(t, d), kernel


@pytest.mark.parametrize("family", families())
def test_every_program_gets_the_host_defines(family: str) -> None:
    src = program_source(family, np.dtype(np.float32))
    for name, value in shader_defines().items():
        assert f"#define {name} {value}\n" in src, (family, name)
