"""What a numeric conformance case is, and the strategies its parameters are drawn from.

An :class:`OpSpec` names one raw op, a hypothesis strategy for its parameters (shapes,
flags, layouts and a seed for the values), the edge parameters that always run, and how to
build an :class:`Example` from parameters. The op tables live in ``cases_primitive.py``
and ``cases_fused.py``; :func:`all_specs` joins them in protocol order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from .inputs import LAYOUTS, Example


@dataclass(frozen=True)
class Ctx:
    """What the build step may depend on: the tested dtype and the declared dtypes."""

    dtype: np.dtype
    float_dtypes: tuple[np.dtype, ...]
    index_dtypes: tuple[np.dtype, ...]

    def index_dtype(self, seed: int) -> np.dtype:
        """Rotate through the declared index dtypes so each gets exercised."""
        return self.index_dtypes[seed % len(self.index_dtypes)]


def _default_call(fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    return fn(*args, **kwargs)


@dataclass(frozen=True)
class OpSpec:
    op: str
    draw: st.SearchStrategy[dict[str, Any]]
    build: Callable[[dict[str, Any], Ctx], Example]
    edges: tuple[dict[str, Any], ...] = ()
    fused: bool = False
    outputs: tuple[str, ...] = ("out",)
    call: Callable[[Callable[..., Any], list[Any], dict[str, Any]], Any] = _default_call
    needs_index: bool = False  # skipped (with the reason) on a backend without int dtypes
    #: For accumulating ops: the magnitude their rounding error grows with (n * rms of the
    #: terms summed), which multiplies ``atol``. None: atol is absolute.
    magnitude: Callable[[Example], float] | None = None


def rng_of(params: dict[str, Any]) -> np.random.Generator:
    return np.random.default_rng(int(params.get("seed", 0)))


def edges(*items: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """Edge parameters with defaults filled in (seed 0, dense layout)."""
    return tuple({"seed": 0, "layout": "dense", **item} for item in items)


# -- strategies ------------------------------------------------------------------------------------
#: Sizes that are mostly *not* multiples of 8, 32 or 64 (the usual tiles and group sizes),
#: with a few that are, and 1.
SIZES = st.sampled_from([1, 1, 2, 3, 5, 7, 8, 13, 17, 31, 32, 33, 63, 65, 67])
SMALL_SIZES = st.sampled_from([1, 2, 3, 4, 5, 7, 9])
SEEDS = st.integers(0, 2**31 - 1)
LAYOUT = st.sampled_from(("dense", "dense") + LAYOUTS[1:])


#: Drawn shapes stay below this many elements (edge cases may exceed it) to keep runs fast.
MAX_DRAWN_ELEMENTS = 20_000


def _cap(shape: list[int]) -> tuple[int, ...]:
    shape = list(shape)
    while int(np.prod(shape)) > MAX_DRAWN_ELEMENTS:
        i = int(np.argmax(shape))
        shape[i] = max(1, shape[i] // 2 + 1 if shape[i] > 2 else 1)
    return tuple(shape)


def shapes(min_rank: int = 1, max_rank: int = 3) -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(SIZES, min_size=min_rank, max_size=max_rank).map(_cap)


def draw_params(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Fixed-key parameter dicts with a value seed and a layout unless given."""
    fields.setdefault("seed", SEEDS)
    fields.setdefault("layout", LAYOUT)
    return st.fixed_dictionaries(fields)


def all_specs() -> list[OpSpec]:
    from .cases_fused import FUSED_SPECS
    from .cases_primitive import PRIMITIVE_SPECS

    return [*PRIMITIVE_SPECS, *FUSED_SPECS]
