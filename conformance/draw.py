"""The ``Draw`` interface of ``riftco.ops.samples``, implemented with hypothesis.

Op units say *what* to choose (a shape, one of some options, a subset of axes); hypothesis
chooses, reproducibly (derandomised unless a seed is given). Core never imports hypothesis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from hypothesis import strategies as st
from riftco.ops.samples import SIZES, Params, Samples, cap

T = TypeVar("T")


class HypothesisDraw:
    def __init__(self, data: Any) -> None:
        self.data = data

    def choice(self, options: Sequence[T]) -> T:
        return self.data.draw(st.sampled_from(list(options)))

    def integer(self, lo: int, hi: int) -> int:
        return int(self.data.draw(st.integers(lo, hi)))

    def boolean(self) -> bool:
        return bool(self.data.draw(st.booleans()))

    def shape(self, min_rank: int = 1, max_rank: int = 3) -> tuple[int, ...]:
        dims = self.data.draw(
            st.lists(st.sampled_from(SIZES), min_size=min_rank, max_size=max_rank)
        )
        return cap(dims)

    def subset(self, items: Sequence[int], min_size: int = 1) -> tuple[int, ...]:
        pool = list(items)
        chosen = self.data.draw(
            st.lists(st.sampled_from(pool), min_size=min(min_size, len(pool)), unique=True)
        )
        return tuple(sorted(chosen))


def drawn_params(samples: Samples, data: Any) -> Params:
    """One drawn parameter set: the unit's choices, then a value seed and a layout."""
    d = HypothesisDraw(data)
    assert samples.draw is not None
    params = dict(samples.draw(d))
    params.setdefault("seed", d.integer(0, 2**31 - 1))
    params.setdefault("layout", d.choice(("dense",) + samples.layouts))
    return params
