"""Protocol methods a backend defines but has not written yet: bodies that only raise
``NotImplementedError`` (what ``riftco new-backend`` generates).

Found by reading the source, not by calling, so one run names every such method at
once; a crash in a numeric case names only the first method its example reaches.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

from riftco.ops.opunit import units


def _only_raises_not_implemented(fn: Any) -> bool:
    try:
        source = textwrap.dedent(inspect.getsource(inspect.unwrap(fn)))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):  # no source (C, generated): assume written
        return False
    func = tree.body[0] if tree.body else None
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    body = func.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def unwritten(cls: type) -> tuple[list[str], list[str]]:
    """``(required, optional)`` protocol methods of ``cls`` that only raise
    NotImplementedError, in protocol order."""
    required: list[str] = []
    optional: list[str] = []
    for u in units():
        fn = getattr(cls, u.name, None)
        if callable(fn) and _only_raises_not_implemented(fn):
            (optional if u.fused else required).append(u.name)
    return required, optional
