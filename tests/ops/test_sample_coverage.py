"""The rules conformance's edge samples must follow, so that naming a broken op never
depends on a lucky random draw (issue 30):

1. every argument of every op takes a value other than its default in at least one edge
   (a flag both values, an enumerated option every option); ``scale`` a value other than
   the 1/sqrt(D) a kernel could derive itself; a transpose flag is set on a *square*
   operand, where ignoring it still gives the right shapes;
2. every row, reduction and product op has edges whose rows and whose reduced or column
   extents go one past each chunk, tile and group size the kernels use (64, 256, 1024).

Then three deliberately broken kernels prove the edges catch them with no drawn example.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import riftco
from conformance_mutants import Base
from helpers import plugin_for
from riftco.backends.cpu.backend import view
from riftco.backends.cpu.fused import flash_math
from riftco.conformance import cli
from riftco.ops import units
from riftco.ops.fused.gelu import APPROXIMATIONS
from riftco.ops.opunit import OpUnit
from riftco.ops.primitive.select import COMPARE_OPS
from riftco.ops.samples import BOUNDARIES, Arr, Ctx
from riftco.tensor import Tensor

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
CTX = Ctx(F32, (F32, F64), (np.dtype(np.int32), np.dtype(np.int64)))
TENSOR = "<tensor>"

#: Arguments whose every option must appear in some edge.
OPTIONS: dict[str, tuple[Any, ...]] = {
    "op": tuple(COMPARE_OPS),
    "approximate": APPROXIMATIONS,
    "causal": (True, False),
    "flash": (True, False),
    "keepdims": (True, False),
    "transpose_a": (True, False),
    "transpose_b": (True, False),
}


def _bound(unit: OpUnit) -> list[dict[str, Any]]:
    """Each edge's call as ``{parameter: value}``, defaults filled in; tensors as ``Arr``."""
    assert unit.samples is not None
    fn = unit.function or getattr(riftco.ops, unit.name)
    sig = inspect.signature(fn)
    calls = []
    for params in unit.samples.edges:
        ex = unit.samples.build(params, CTX)
        bound = sig.bind(*ex.args, **ex.kwargs)
        bound.apply_defaults()
        calls.append(dict(bound.arguments))
    return calls


def _plain(v: Any) -> Any:
    if isinstance(v, Arr) or (isinstance(v, list) and v and isinstance(v[0], Arr)):
        return TENSOR
    return v


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and bool(a == b)


def _sampled() -> list[OpUnit]:
    return [u for u in units() if u.samples is not None]


def _head_dim(call: dict[str, Any]) -> int:
    if "qkv" in call:
        return call["qkv"].value.shape[-1] // 3 // call["heads"]
    return int(call["q"].value.shape[-1])


@pytest.mark.parametrize("unit", _sampled(), ids=lambda u: u.name)
def test_every_argument_takes_a_non_default_value_in_an_edge(unit: OpUnit) -> None:
    calls = _bound(unit)
    fn = unit.function or getattr(riftco.ops, unit.name)
    missing = []
    for name, par in inspect.signature(fn).parameters.items():
        seen = [_plain(c[name]) for c in calls]
        if all(v == TENSOR for v in seen if isinstance(v, str)) and TENSOR in seen:
            if par.default is None and None not in seen:
                missing.append(f"{name}: never None (its default)")
            elif par.default is None and TENSOR not in seen:
                missing.append(f"{name}: never a tensor")
            continue
        if name in OPTIONS:
            absent = [o for o in OPTIONS[name] if not any(_same(o, v) for v in seen)]
            if absent:
                missing.append(f"{name}: never {absent}")
        elif par.default is not inspect.Parameter.empty:
            if all(_same(v, par.default) for v in seen):
                missing.append(f"{name}: always its default {par.default!r}")
        elif len({repr(v) for v in seen}) < 2:
            missing.append(f"{name}: one value in every edge ({seen[0]!r})")
    assert missing == [], f"[{unit.name}] edges leave arguments at one value: {missing}"


@pytest.mark.parametrize(
    "unit", [u for u in _sampled() if "scale" in inspect.signature(u.method).parameters],
    ids=lambda u: u.name,
)  # fmt: skip
def test_scale_is_not_always_one_over_sqrt_d(unit: OpUnit) -> None:
    """A kernel computing 1/sqrt(D) itself passes every edge where scale is that."""
    other = [
        c for c in _bound(unit)
        if _head_dim(c) > 0 and abs(c["scale"] - 1 / math.sqrt(_head_dim(c))) > 1e-6
    ]  # fmt: skip
    assert other, f"[{unit.name}] every edge uses scale = 1/sqrt(D)"


@pytest.mark.parametrize(
    "unit", [u for u in _sampled() if "transpose_b" in inspect.signature(u.method).parameters],
    ids=lambda u: u.name,
)  # fmt: skip
def test_transpose_flags_meet_square_operands(unit: OpUnit) -> None:
    """On a non-square operand a kernel that ignores the flag gets the shapes wrong and
    fails anyway; on a square one only the values show it."""
    for flag, operand in (("transpose_a", "a"), ("transpose_b", "b")):
        square = [
            c for c in _bound(unit)
            if c[flag] and c[operand].value.shape[-1] == c[operand].value.shape[-2] > 1
        ]  # fmt: skip
        assert square, f"[{unit.name}] no edge sets {flag} on a square {operand}"


def _rows_cols(name: str) -> Callable[[dict[str, Any]], dict[str, int]]:
    """rows (everything before the last axis) and columns (the last axis) of ``name``."""

    def extents(call: dict[str, Any]) -> dict[str, int]:
        shape = call[name].value.shape
        return {"rows": math.prod(shape[:-1]), "columns": shape[-1]}

    return extents


def _reduced(call: dict[str, Any]) -> dict[str, int]:
    shape, axes = call["x"].value.shape, call["axes"]
    kept = [d for i, d in enumerate(shape) if i not in axes]
    return {"reduced": math.prod(shape[a] for a in axes), "kept": math.prod(kept)}


def _mkn(x: str, w: str) -> Callable[[dict[str, Any]], dict[str, int]]:
    def extents(call: dict[str, Any]) -> dict[str, int]:
        m, k = call[x].value.shape[-2:]
        if call.get("transpose_a"):
            m, k = k, m
        n = call[w].value.shape[-2 if call.get("transpose_b") else -1]
        return {"M": m, "K": k, "N": n}

    return extents


def _length(name: str) -> Callable[[dict[str, Any]], dict[str, int]]:
    def extents(call: dict[str, Any]) -> dict[str, int]:
        return {"T": call[name].value.shape[-2 if name != "qkv" else 1]}

    return extents


def _ids(call: dict[str, Any]) -> dict[str, int]:
    return {"ids": call["ids"].value.size, "width": call[_first_float(call)].value.shape[-1]}


def _first_float(call: dict[str, Any]) -> str:
    return next(k for k, v in call.items() if isinstance(v, Arr) and v.kind == "float")


#: Ops whose kernels split rows, reduced axes or products into chunks, tiles or groups:
#: the extents each must take one past every boundary.
EXTENTS: dict[str, Callable[[dict[str, Any]], dict[str, int]]] = {
    "sum": _reduced, "max": _reduced, "argmax": _rows_cols("x"),
    "matmul": _mkn("a", "b"),
    "softmax": _rows_cols("x"), "softmax_backward": _rows_cols("dy"),
    "layer_norm": _rows_cols("x"), "layer_norm_backward": _rows_cols("dy"),
    "add_layer_norm": _rows_cols("x"), "add_layer_norm_backward": _rows_cols("dy"),
    "rms_norm": _rows_cols("x"), "rms_norm_backward": _rows_cols("dy"),
    "cross_entropy": _rows_cols("logits"), "cross_entropy_backward": _rows_cols("logits"),
    "embedding": _ids, "embedding_backward": _ids,
    "attention": _length("q"), "attention_backward": _length("q"),
    "flash_attention": _length("q"), "flash_attention_backward": _length("q"),
    "attention_qkv": _length("qkv"), "attention_qkv_backward": _length("qkv"),
    "linear": _mkn("x", "weight"), "linear_backward": _mkn("x", "weight"),
    "linear_gelu": _mkn("x", "weight"), "linear_gelu_backward": _mkn("x", "weight"),
}  # fmt: skip
#: Families with no rows to split: one element in, one out (or a copy, or a list update).
ELEMENTWISE = {"memory", "select", "binary", "unary", "layout", "gelu", "adam", "adam_multi"}


def test_every_op_is_either_elementwise_or_has_its_extents_named() -> None:
    unnamed = [u.name for u in _sampled() if u.module not in ELEMENTWISE and u.name not in EXTENTS]
    assert unnamed == [], "a new row/reduction op: name the extents its kernels split"


@pytest.mark.parametrize("op", sorted(EXTENTS))
def test_edges_go_one_past_every_chunk_tile_and_group_size(op: str) -> None:
    unit = next(u for u in units() if u.name == op)
    seen: dict[str, set[int]] = {}
    for call in _bound(unit):
        for name, n in EXTENTS[op](call).items():
            seen.setdefault(name, set()).add(n)
    missing = [f"{name} = {b + 1}" for name, ns in seen.items() for b in BOUNDARIES
               if b + 1 not in ns]  # fmt: skip
    assert missing == [], f"[{op}] no edge with {', '.join(missing)}"


# -- broken kernels the edges alone must catch ----------------------------------------------
class FlashIgnoresScale(Base):
    """Uses 1/sqrt(D) whatever scale it is given (a kernel with the GPT's scale baked in)."""

    def flash_attention(self, q: Tensor, k: Tensor, v: Tensor, scale: float, causal: bool) -> Any:
        own = 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else scale
        out, lse = flash_math(view(q), view(k), view(v), own, causal)
        return self.result(out, q.dtype), self.result(lse, q.dtype)


class LayerNormBackwardDropsLastChunk(Base):
    """Sums dgamma and dbeta over 64-row chunks and forgets the last, partial one."""

    def layer_norm_backward(self, dy: Tensor, x: Tensor, gamma: Tensor, mean: Tensor,
                            rstd: Tensor) -> Any:  # fmt: skip
        dx, dgamma, dbeta = super().layer_norm_backward(dy, x, gamma, mean, rstd)
        c = x.shape[-1]
        rows = x.size // c if c else 0
        if rows <= 64 or rows % 64 == 0:
            return dx, dgamma, dbeta
        keep = rows - rows % 64
        g, xv = view(dy).reshape(rows, c)[:keep], view(x).reshape(rows, c)[:keep]
        mu, r = view(mean).reshape(rows)[:keep], view(rstd).reshape(rows)[:keep]
        xhat = (xv - mu[:, None]) * r[:, None]
        return dx, self.result((g * xhat).sum(axis=0), x.dtype), self.result(g.sum(axis=0), x.dtype)


class MatmulIgnoresTransposeBOnSquare(Base):
    """Skips the transpose of b when b is square (the shapes agree either way)."""

    def matmul(self, a: Tensor, b: Tensor, transpose_a: bool, transpose_b: bool) -> Tensor:
        square = b.shape[-1] == b.shape[-2]
        return super().matmul(a, b, transpose_a, transpose_b and not square)


@pytest.mark.parametrize(
    ("cls", "op"),
    [(FlashIgnoresScale, "flash_attention"),
     (LayerNormBackwardDropsLastChunk, "layer_norm_backward"),
     (MatmulIgnoresTransposeBOnSquare, "matmul")],
    ids=lambda v: v.__name__ if isinstance(v, type) else v,
)  # fmt: skip
def test_broken_kernels_fail_on_edges_alone(
    registry: Any, tmp_path: Path, cls: type[Base], op: str
) -> None:
    named = type(cls.__name__, (cls,), {"name": "mutant"})
    registry.register(plugin_for(named), name="mutant")
    out = tmp_path / "report.json"
    argv = ["mutant", "--ops", f"{op}[*", "--max-examples", "0", "--json", str(out), "--quiet"]
    rc = cli.main(argv)
    cases = [c for d in json.loads(out.read_text())["devices"] for c in d["cases"]]
    bad = [c for c in cases if c["status"] in ("fail", "error")]
    assert rc == 1 and bad, f"{cls.__name__} passed {op} on its edges"
    assert all(c["op"] == op for c in bad)
    assert all(c["examples"] <= len(next(u for u in units() if u.name == op).samples.edges)
               for c in bad if c["id"].startswith(op))  # fmt: skip
