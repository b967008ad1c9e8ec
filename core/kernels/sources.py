"""Kernel sources: one file per family in ``riftco.shaders``, assembled per dtype.

Every runtime compiles the very same string: ``prelude.h``, then the type defines, then
the family file. The prelude picks the Metal or OpenCL branch from the compiler's predefined
macros, so the Metal backend, its OpenCL stand-in and the MSL syntax check all see one
text. The prelude is inlined rather than ``#include``d because metalcompute compiles a
source string with no include path.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib import resources

import numpy as np

#: C type of each riftco dtype inside kernels (OpenCL C and MSL spell these alike).
C_TYPES: dict[np.dtype, str] = {
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.int32): "int",
    np.dtype(np.int64): "long",
}


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


def program_source(
    family: str,
    dtype: np.dtype,
    index_dtype: np.dtype | None = None,
    defines: Mapping[str, str] | None = None,
) -> str:
    """The complete source of ``family`` for element type ``dtype`` (and index type)."""
    dtype = np.dtype(dtype)
    head = []
    if dtype == np.float64 or "double" in (defines or {}).values():
        head.append("#define RIFTCO_FP64 1")
    # NOTE: type macros come *after* the prelude: Apple's metal_stdlib (included by the
    # prelude) uses T as a template parameter name, which a prior #define T would break.
    types = [f"#define T {c_type(dtype)}", f"#define IDX {c_type(index_dtype or np.int32)}"]
    types += [f"#define {key} {value}" for key, value in (defines or {}).items()]
    return "\n".join([*head, shader_text("prelude.h"), *types, shader_text(f"{family}.cl")])
