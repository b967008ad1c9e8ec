"""The op table: one row per op unit, for docs/BACKENDS.md and ``riftco ops``.

Generated from the registry, so the guide cannot list an op the code lacks or describe it
differently; ``tests/ops/test_op_units.py`` checks the copy in docs/BACKENDS.md is current
(regenerate it with ``python -m riftco.ops.table --write docs/BACKENDS.md``).
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path

from ..output_files import write_file
from .opunit import OpUnit, units

BEGIN, END = "<!-- op-table:begin -->", "<!-- op-table:end -->"


def signature(u: OpUnit) -> str:
    params = list(inspect.signature(u.method).parameters)[1:]
    return f"{u.name}({', '.join(params)})"


def module_path(u: OpUnit) -> str:
    return f"core/ops/{'fused' if u.fused else 'primitive'}/{u.module}.py"


def rows() -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for u in units():
        kind = "optional" if u.fused else "required"
        tol = u.tolerance.for_dtype("float32")
        tol_text = "exact" if tol.atol == tol.rtol == 0 else f"{tol.atol:.0e} / {tol.rtol:.0e}"
        if u.samples is None and not u.in_place and u.name not in ("from_numpy",):
            tol_text = "-"
        traits = ", ".join(t for t, on in (("in place", u.in_place),
                                             ("deterministic", u.deterministic)) if on)  # fmt: skip
        out.append((f"`{signature(u)}`", kind, f"`{module_path(u)}`", u.summary, u.nan,
                    traits or "-", tol_text))  # fmt: skip
    return out


HEADER = ("method", "kind", "op unit", "what it returns", "NaN / Inf", "notes",
          "float32 tolerance (atol / rtol)")  # fmt: skip


def markdown() -> str:
    def esc(cell: str) -> str:
        return cell.replace("|", "\\|")

    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows()]
    return "\n".join(lines)


def text(path: Callable[[OpUnit], str] = module_path) -> str:
    """The plain-text listing ``riftco ops`` prints, each op's file given by ``path``."""
    out = []
    for u in units():
        out.append(f"{signature(u):<70} {'optional' if u.fused else 'required':<9} {path(u)}")
    return "\n".join(out)


def embed(doc: str) -> str:
    """``doc`` with the text between the op-table markers replaced by the current table."""
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not pattern.search(doc):
        raise ValueError(f"no {BEGIN} ... {END} markers in the document")
    return pattern.sub(lambda _: f"{BEGIN}\n{markdown()}\n{END}", doc)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--write":
        path = Path(argv[1])
        write_file(path, embed(path.read_text(encoding="utf-8")), "ops table")
        return 0
    print(markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
