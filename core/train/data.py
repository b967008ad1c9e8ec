"""Training text: the embedded tiny Shakespeare corpus or any UTF-8 file, split 90/10.

Batches are random windows drawn with a caller-owned ``numpy.random.Generator``; the
trainer stores that generator's state in each checkpoint, which is what lets a resumed
run draw exactly the batches an uninterrupted run would have drawn.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from .tokenizer import CharTokenizer, DataError

EMBEDDED_NAME = "tinyshakespeare.txt"
TRAIN_FRACTION = 0.9


def load_text(path: str | os.PathLike[str] | None = None) -> tuple[str, str]:
    """``(text, source)``: the file at ``path``, or the corpus shipped in ``riftco.data``."""
    if path is None:
        text = resources.files("riftco.data").joinpath(EMBEDDED_NAME).read_text(encoding="utf-8")
        return text, f"embedded {EMBEDDED_NAME}"
    p = Path(path)
    if not p.is_file():
        raise DataError(f"[data] {str(p)!r} is not a readable file")
    raw = p.read_bytes()
    if not raw:
        raise DataError(f"[data] {str(p)!r} is empty; give a UTF-8 text file with some text in it")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start : exc.start + 4].hex(" ")
        raise DataError(
            f"[data] {str(p)!r} is not valid UTF-8: byte offset {exc.start} ({bad}): {exc.reason}; "
            "re-encode it, e.g. `iconv -f latin1 -t utf-8`"
        ) from None
    return text.removeprefix("\ufeff"), str(p)


@dataclass
class CharDataset:
    """Encoded text split into a training head (90 %) and a validation tail (10 %)."""

    tokenizer: CharTokenizer
    train: np.ndarray  # (N_train,) int32
    val: np.ndarray  # (N_val,) int32
    source: str

    @classmethod
    def from_text(
        cls,
        text: str,
        context: int,
        source: str = "<text>",
        tokenizer: CharTokenizer | None = None,
    ) -> CharDataset:
        """Split ``text``; each split must hold at least one window of ``context + 1`` chars."""
        if context < 1:
            raise DataError(f"[data] context must be at least 1; got {context}")
        if not text:
            raise DataError(f"[data] {source} holds no text")
        need = min_chars(context)
        if len(text) < need:
            raise DataError(
                f"[data] {source} has {len(text)} characters; context {context} needs at least "
                f"{need} (a 90/10 split with {context + 1} characters in the validation part); "
                "use a longer text or a smaller --context"
            )
        tok = tokenizer if tokenizer is not None else CharTokenizer.from_text(text)
        ids = tok.encode(text)
        cut = int(len(ids) * TRAIN_FRACTION)
        return cls(tok, ids[:cut], ids[cut:], source)

    def batch(
        self, split: str, batch_size: int, context: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Random windows ``(x, y)``, each ``(B, T)`` int32, ``y`` shifted by one."""
        data = self.train if split == "train" else self.val
        starts = rng.integers(0, len(data) - context, size=batch_size)
        offsets = starts[:, None] + np.arange(context)[None, :]  # (B, T)
        return data[offsets], data[offsets + 1]


def min_chars(context: int) -> int:
    """Smallest text whose 10 % validation tail still holds one ``context + 1`` window."""
    n = context + 1
    while len(range(int(n * TRAIN_FRACTION), n)) < context + 1:
        n += 1
    return n
