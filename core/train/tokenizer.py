"""Character-level tokenizer: one id per distinct character of the training text.

Tiny Shakespeare has 65 characters, so a character vocabulary keeps the model small and
needs no merges file; the vocabulary travels inside every checkpoint so ``riftco sample``
decodes with exactly the ids the model was trained on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..errors import RiftcoError


class DataError(RiftcoError, ValueError):
    """Training text or prompt cannot be used: empty, too short, undecodable, unknown chars."""


class CharTokenizer:
    """Maps characters to ids in sorted code-point order (stable across runs and machines)."""

    def __init__(self, chars: Iterable[str]) -> None:
        self.chars: list[str] = list(chars)
        if not self.chars:
            raise DataError("[tokenizer] the vocabulary is empty")
        if any(len(c) != 1 for c in self.chars) or len(set(self.chars)) != len(self.chars):
            raise DataError("[tokenizer] the vocabulary must be distinct single characters")
        self._table = np.array(self.chars, dtype=object)
        codes = np.array([ord(c) for c in self.chars], dtype=np.uint32)
        self._order = np.argsort(codes)
        self._sorted_codes = codes[self._order]

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        """Ids as int32 (the index dtype every backend supports)."""
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)  # one code per char
        pos = np.searchsorted(self._sorted_codes, codes)
        pos = np.minimum(pos, len(self._sorted_codes) - 1)
        bad = np.flatnonzero(self._sorted_codes[pos] != codes)
        if bad.size:
            ch = text[bad[0]]
            raise DataError(
                f"[tokenizer] character {ch!r} (U+{ord(ch):04X}) is not in the vocabulary of "
                f"{self.vocab_size} characters this model was trained on"
            )
        return self._order[pos].astype(np.int32)

    def decode(self, ids: Iterable[int] | np.ndarray) -> str:
        arr = np.asarray(ids, dtype=np.int64).reshape(-1)
        if arr.size and (arr.min() < 0 or arr.max() >= self.vocab_size):
            raise DataError(
                f"[tokenizer] id out of range [0, {self.vocab_size}): min {arr.min()}, "
                f"max {arr.max()}"
            )
        return "".join(self._table[arr].tolist())

    def to_dict(self) -> dict[str, Any]:
        return {"type": "char", "chars": "".join(self.chars)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CharTokenizer:
        if data.get("type") != "char":
            raise DataError(f"[tokenizer] unknown tokenizer type {data.get('type')!r}")
        return cls(list(data["chars"]))
