"""Every repository path the docs and sources cite exists: a comment that sends a reader
to ``tests/test_fast_math.py`` after the tests moved into folders sends them nowhere."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: A path under one of the repository's folders, ending in a file extension.
CITED = re.compile(
    r"(?<![\w./-])((?:tests|bench|core|backends|shaders|docs|examples|conformance|\.ci)/"
    r"[\w./-]*\w\.(?:py|md|cl|h|c|toml|json|sh))"
)
SCANNED = ("docs", "core", "backends", "shaders", "bench", "conformance", "examples", ".ci")
#: Cited paths that are not files of this repository, each with the reason.
NOT_OURS = {
    "tests/test_conformance.py": "the test `riftco new-backend` writes into a new package",
    "shaders/name.h": "the placeholder in the prelude's description of #include",
}
#: Where scripts write their results (made when they run, not kept in the repository).
OUTPUTS = "bench/results/"


def _cited() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    files = [ROOT / "README.md", ROOT / "Makefile"]
    files += [p for d in SCANNED for p in (ROOT / d).rglob("*") if p.is_file()]
    for f in files:
        if f.suffix not in ("", ".py", ".md", ".cl", ".h", ".c") or "__pycache__" in f.parts:
            continue
        for m in CITED.finditer(f.read_text(encoding="utf-8", errors="replace")):
            found.setdefault(m.group(1), set()).add(str(f.relative_to(ROOT)))
    return found


def test_every_cited_path_exists() -> None:
    cited = _cited()
    assert len(cited) > 50, "the scan found almost nothing: is the pattern still right?"
    missing = {
        path: sorted(where)
        for path, where in cited.items()
        if not (ROOT / path).exists() and path not in NOT_OURS and not path.startswith(OUTPUTS)
    }
    assert not missing, f"cited but absent (moved or renamed?): {missing}"


def test_the_exceptions_are_still_cited() -> None:
    """An exception nobody cites any more would hide the next broken citation of it."""
    cited = _cited()
    assert set(NOT_OURS) <= set(cited), set(NOT_OURS) - set(cited)
