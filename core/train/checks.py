"""Numeric ranges for training and sampling settings, shared by the CLI and the library.

``float("nan") > 0`` is False but so is ``nan <= 0``: a bare sign test lets NaN through,
and a NaN learning rate trains to "loss nan" with exit 0. Each setting therefore names a
:class:`Range` that requires a finite value, and the CLI and ``TrainConfig.validate`` read
the same one.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import DomainError


@dataclass(frozen=True)
class Range:
    low: float
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    integer: bool = False

    def holds(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.integer and not float(value).is_integer():
            return False
        v = float(value)
        if not math.isfinite(v):
            return False
        above = v > self.low if self.low_open else v >= self.low
        below = v < self.high if self.high_open else v <= self.high
        return above and below

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        text = f"{kind} {'>' if self.low_open else '>='} {self.low:g}"
        if self.high != math.inf:
            text += f" and {'<' if self.high_open else '<='} {self.high:g}"
        return text

    def check(self, op: str, name: str, value: Any) -> None:
        if not self.holds(value):
            raise DomainError(f"[{op}] {name} must be {self.describe()}; got {value!r}")

    def arg(self) -> Callable[[str], Any]:
        """An argparse ``type=`` that parses and checks (its message names the flag)."""
        kind = int if self.integer else float

        def parse(text: str) -> Any:
            try:
                value = kind(text)
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"must be {self.describe()}; got {text!r}"
                ) from None
            if not self.holds(value):
                raise argparse.ArgumentTypeError(f"must be {self.describe()}; got {text}")
            return value

        parse.__name__ = kind.__name__
        return parse


POSITIVE_INT = Range(1, integer=True)
COUNT = Range(0, integer=True)  # >= 0: steps of warm-up, seeds, characters to sample, top-k
POSITIVE = Range(0, low_open=True)
NON_NEGATIVE = Range(0)
UNIT = Range(0, 1)
FRACTION = Range(0, 1, high_open=True)
