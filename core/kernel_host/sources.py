"""Kernel sources: one file per family in ``riftco.shaders``, assembled per dtype.

Every runtime compiles the very same string: ``prelude.h``, then the type defines and the
numbers host and shaders share (``shader_defines.py``: the shaders use them, never define
them), then the family file. The prelude picks the Metal or OpenCL branch from the
compiler's predefined macros, so the Metal backend, its OpenCL stand-in and the MSL syntax
check all see one text.

Shared helpers live in headers (``shaders/*.h``) that a family file pulls in with a line
``#include "name.h"``. metalcompute compiles one source string with no include path, so
the host inlines them here instead of leaving the directive to a compiler: each header
enters a program once (a second ``#include`` of it becomes a comment, like ``#pragma
once``), a cycle is an error naming the chain, and ``#include <...>`` (the prelude's
``metal_stdlib``) is left to the compiler. The prelude counts as already included.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from importlib import resources

import numpy as np

from ..errors import KernelCompileError
from .half_storage import HALF_COMPUTE_FAMILIES, HALF_NAMES, STORAGE_C_TYPE
from .shader_defines import shader_defines

#: C type of each riftco dtype inside kernels (OpenCL C, MSL and CUDA spell these alike;
#: the halves are held as their bits, half.h converts them).
C_TYPES: dict[np.dtype, str] = {
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.int32): "int",
    np.dtype(np.int64): "long",
    **dict.fromkeys(HALF_NAMES, STORAGE_C_TYPE),
}

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"[ \t]*(?://.*|/\*.*\*/[ \t]*)?$', re.M)
_PRELUDE = "prelude.h"


@functools.cache
def shader_text(filename: str) -> str:
    """The text of one file in ``riftco.shaders`` (``prelude.h``, ``matmul.cl``, ...)."""
    return resources.files("riftco.shaders").joinpath(filename).read_text(encoding="utf-8")


def families() -> list[str]:
    """Every kernel family shipped (the ``*.cl`` files), sorted."""
    root = resources.files("riftco.shaders")
    return sorted(p.name[:-3] for p in root.iterdir() if p.name.endswith(".cl"))


def c_type(dtype: np.dtype) -> str:
    return C_TYPES[np.dtype(dtype)]


def expand_includes(
    text: str,
    name: str,
    read: Callable[[str], str] | None = None,
    included: set[str] | None = None,
    _chain: tuple[str, ...] = (),
) -> str:
    """``text`` (the file ``name``) with every ``#include "x.h"`` replaced by ``x.h``'s text.

    ``read(filename) -> str`` supplies header texts (``shader_text`` by default);
    ``included`` collects the headers already inlined into this program (shared across
    the recursion so that each enters once)."""
    reader = read or shader_text
    done = included if included is not None else {_PRELUDE}
    chain = (*_chain, name)

    def inline(match: re.Match[str]) -> str:
        header = match.group(1)
        if header in chain:
            loop = " -> ".join((*chain, header))
            raise KernelCompileError(f"[compile] #include cycle in shaders/: {loop}")
        if header in done:
            return f"/* {header}: already included */"
        done.add(header)
        try:
            body = reader(header)
        except (FileNotFoundError, IsADirectoryError, KeyError):
            raise KernelCompileError(
                f'[compile] {name} includes "{header}", which is not a file in shaders/'
            ) from None
        body = expand_includes(body, header, reader, done, chain)
        return f"/* begin {header} */\n{body.rstrip()}\n/* end {header} */"

    return _INCLUDE.sub(inline, text)


def program_source(
    family: str,
    dtype: np.dtype,
    index_dtype: np.dtype | None = None,
    defines: Mapping[str, str] | None = None,
) -> str:
    """The complete source of ``family`` for element type ``dtype`` (and index type)."""
    return _program_source(
        family, np.dtype(dtype), np.dtype(index_dtype or np.int32), tuple((defines or {}).items())
    )


@functools.cache
def _program_source(
    family: str, dtype: np.dtype, index_dtype: np.dtype, defines: tuple[tuple[str, str], ...]
) -> str:
    head = []
    if dtype == np.float64 or "double" in dict(defines).values():
        head.append("#define RIFTCO_FP64 1")
    # NOTE: type macros come *after* the prelude: Apple's metal_stdlib (included by the
    # prelude) uses T as a template parameter name, which a prior #define T would break.
    if dtype in HALF_NAMES and family in HALF_COMPUTE_FAMILIES:  # float compute, half storage
        storage = f"RIFTCO_STORAGE_{HALF_NAMES[dtype].upper()}"
        types = ["#define T float", f"#define {storage} 1"]
    else:
        types = [f"#define T {c_type(dtype)}"]
    types.append(f"#define IDX {c_type(index_dtype)}")
    types += [f"#define {key} {value}" for key, value in shader_defines().items()]
    types += [f"#define {key} {value}" for key, value in defines]
    body = expand_includes(shader_text(f"{family}.cl"), f"{family}.cl")
    return "\n".join([*head, shader_text(_PRELUDE), *types, body])
