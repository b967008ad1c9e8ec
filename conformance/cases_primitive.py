"""Numeric cases for the required primitives (elementwise, reductions, matmul, layout)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import riftco
from hypothesis import strategies as st

from .cases import SIZES, SMALL_SIZES, Ctx, OpSpec, draw_params, edges, rng_of, shapes
from .inputs import Arr, Example, grid, log_uniform, normal, signed_away_from_zero

Gen = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]

#: Shapes every elementwise op meets: size-1 axes, odd sizes, a long row, each layout.
ELEMENTWISE_EDGES = edges(
    {"label": "size-1 axes", "shape": (1, 1, 1)},
    {"label": "odd sizes", "shape": (3, 67)},
    {"label": "long row", "shape": (2, 4097)},
    {"label": "transposed", "shape": (5, 33), "layout": "transposed"},
    {"label": "permuted", "shape": (2, 3, 5), "layout": "permuted"},
    {"label": "broadcast", "shape": (4, 9), "layout": "broadcast"},
    {"label": "sliced", "shape": (3, 17), "layout": "sliced"},
)

UNARY_DOMAINS: dict[str, Gen] = {
    "neg": lambda r, s: normal(r, s, 3.0),
    "exp": lambda r, s: normal(r, s, 3.0),
    "log": lambda r, s: log_uniform(r, s, 1e-3, 1e3),
    "sqrt": lambda r, s: log_uniform(r, s, 1e-4, 1e4),
    "rsqrt": lambda r, s: log_uniform(r, s, 1e-4, 1e4),
    "tanh": lambda r, s: normal(r, s, 3.0),
    "abs": lambda r, s: normal(r, s, 3.0),
}

BINARY_DOMAINS: dict[str, tuple[Gen, Gen]] = {
    "add": (normal, normal),
    "sub": (normal, normal),
    "mul": (normal, normal),
    "div": (normal, signed_away_from_zero),
    "maximum": (grid, grid),  # a grid makes equal operands common
    "minimum": (grid, grid),
}


def _unary(op: str, gen: Gen) -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        value = gen(rng_of(p), p["shape"])
        if p.get("large"):  # large magnitudes: exp(+-80) is finite in float32
            value = np.clip(value * 30.0, -80.0, 80.0)
        return Example(p.get("label", "drawn"), [Arr(value, layout=p["layout"])], params=p)

    extra = edges({"label": "large magnitude (+-80)", "shape": (4, 33), "large": True})
    large = extra if op in ("exp", "tanh", "neg", "abs") else ()
    return OpSpec(op, draw_params(shape=shapes()), build, ELEMENTWISE_EDGES + large)


def _binary(op: str, gens: tuple[Gen, Gen]) -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        rng = rng_of(p)
        a, b = (g(rng, p["shape"]) for g in gens)
        lay_b = p.get("layout_b", p["layout"])
        return Example(p.get("label", "drawn"), [Arr(a, layout=p["layout"]), Arr(b, layout=lay_b)])

    mixed = edges(
        {"label": "mixed layouts", "shape": (6, 5), "layout": "transposed", "layout_b": "broadcast"}
    )
    return OpSpec(op, draw_params(shape=shapes()), build, ELEMENTWISE_EDGES + mixed)


def _scalar_op(op: str, values: list[float]) -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        rng = rng_of(p)
        value = p["value"]
        if op == "pow_scalar" and not float(value).is_integer():
            x = log_uniform(rng, p["shape"], 0.1, 10.0)  # fractional powers need x > 0
        elif op == "pow_scalar":
            x = signed_away_from_zero(rng, p["shape"])
        else:
            x = normal(rng, p["shape"], 2.0)
        return Example(p.get("label", "drawn"), [Arr(x, layout=p["layout"]), value])

    draw = draw_params(shape=shapes(), value=st.sampled_from(values))
    edge = tuple({**e, "value": v} for e in ELEMENTWISE_EDGES for v in values[:1])
    return OpSpec(op, draw, build, edge)


def _where() -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        rng, s = rng_of(p), p["shape"]
        cond = (rng.random(s) < 0.5).astype(np.float64)
        args = [Arr(cond, "mask", p["layout"]), Arr(normal(rng, s)), Arr(normal(rng, s))]
        return Example(p.get("label", "drawn"), args)

    return OpSpec("where", draw_params(shape=shapes()), build, ELEMENTWISE_EDGES)


def _compare() -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        rng, s = rng_of(p), p["shape"]
        a, b = Arr(grid(rng, s), layout=p["layout"]), Arr(grid(rng, s))
        return Example(p.get("label", "drawn"), [a, b, p["cmp"]])

    cmps = st.sampled_from(("lt", "le", "gt", "ge", "eq", "ne"))
    edge = tuple({**e, "cmp": c} for e in ELEMENTWISE_EDGES[:3] for c in ("eq", "lt", "ge"))
    return OpSpec("compare", draw_params(shape=shapes(), cmp=cmps), build, edge)


def _cast() -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        rng, s = rng_of(p), p["shape"]
        to = p["to"]
        others = [d for d in ctx.float_dtypes if d != ctx.dtype]
        if to == "other float" and not others:
            to = "index"
        if to == "index":  # float -> int truncates toward zero (negative values included)
            target = ctx.index_dtype(p["seed"])
            x = Arr(rng.uniform(-1000, 1000, s), layout=p["layout"])
        elif to == "float from index":
            target = ctx.dtype
            idt = ctx.index_dtype(p["seed"])
            x = Arr(rng.integers(-1000, 1000, s), "index", p["layout"], idt)
        else:
            target = others[0]
            x = Arr(normal(rng, s), layout=p["layout"])
        return Example(f"{p.get('label', 'drawn')}, to {np.dtype(target).name}", [x, target])

    to = st.sampled_from(("index", "float from index", "other float"))
    edge = tuple(
        {**e, "to": t} for e in ELEMENTWISE_EDGES[:4] for t in ("index", "float from index")
    )
    return OpSpec("cast", draw_params(shape=shapes(), to=to), build, edge, needs_index=True)


@st.composite
def _reduce_params(draw: Any) -> dict[str, Any]:
    shape = draw(shapes(1, 4))
    axes = draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
    return draw(
        draw_params(shape=st.just(shape), axes=st.just(tuple(sorted(axes))), keepdims=st.booleans())
    )


def _reduce(op: str) -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        x = normal(rng_of(p), p["shape"])
        if p.get("neg_inf"):
            x[..., ::3] = -np.inf
        return Example(
            p.get("label", "drawn"),
            [Arr(x, layout=p["layout"]), p["axes"]],
            {"keepdims": p["keepdims"]},
        )

    edge = edges(
        {"label": "long row", "shape": (3, 4097), "axes": (1,), "keepdims": False},
        {"label": "all axes", "shape": (5, 7, 3), "axes": (0, 1, 2), "keepdims": True},
        {
            "label": "middle axis, transposed",
            "shape": (4, 33, 6),
            "axes": (1,),
            "keepdims": True,
            "layout": "transposed",
        },
        {
            "label": "broadcast",
            "shape": (9, 65),
            "axes": (0,),
            "keepdims": False,
            "layout": "broadcast",
        },
        {"label": "size-1 axes", "shape": (1, 1, 5), "axes": (0, 1), "keepdims": False},
        *(
            [
                {
                    "label": "rows with -inf",
                    "shape": (4, 10),
                    "axes": (1,),
                    "keepdims": False,
                    "neg_inf": True,
                }
            ]
            if op == "max"
            else []
        ),
    )
    return OpSpec(
        op, _reduce_params(), build, edge, magnitude=_sum_magnitude if op == "sum" else None
    )


def _rms(a: np.ndarray) -> float:
    finite = a[np.isfinite(a)]
    return float(np.sqrt(np.mean(finite * finite))) if finite.size else 0.0


def _sum_magnitude(ex: Example) -> float:
    x, axes = ex.args[0].value, ex.args[1]
    n = int(np.prod([x.shape[a] for a in axes]))
    return max(1.0, n * _rms(x))


def _argmax() -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        rng = rng_of(p)
        x = grid(rng, p["shape"], 2) if p["ties"] else normal(rng, p["shape"])
        return Example(p.get("label", "drawn"), [Arr(x, layout=p["layout"])])

    edge = edges(
        {"label": "ties (first maximum wins)", "shape": (6, 9), "ties": True},
        {"label": "long row", "shape": (2, 4097), "ties": False},
        {"label": "width 1", "shape": (5, 1), "ties": False},
        {"label": "transposed", "shape": (7, 33), "ties": True, "layout": "transposed"},
    )
    return OpSpec("argmax", draw_params(shape=shapes(), ties=st.booleans()), build, edge)


@st.composite
def _matmul_params(draw: Any) -> dict[str, Any]:
    batch = tuple(draw(st.lists(SMALL_SIZES, max_size=2)))
    return draw(
        draw_params(
            batch=st.just(batch), m=SIZES, k=SIZES, n=SIZES, ta=st.booleans(), tb=st.booleans()
        )
    )


def _matmul() -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        rng, b = rng_of(p), tuple(p["batch"])
        a_shape = b + ((p["k"], p["m"]) if p["ta"] else (p["m"], p["k"]))
        b_shape = b + ((p["n"], p["k"]) if p["tb"] else (p["k"], p["n"]))
        lay = p["layout"] if p["layout"] != "broadcast" or b else "dense"
        args = [Arr(normal(rng, a_shape), layout=lay), Arr(normal(rng, b_shape), layout=lay)]
        return Example(
            p.get("label", "drawn"), args, {"transpose_a": p["ta"], "transpose_b": p["tb"]}
        )

    edge = edges(
        {"label": "1x1x1", "batch": (), "m": 1, "k": 1, "n": 1, "ta": False, "tb": False},
        {"label": "odd sizes", "batch": (3,), "m": 33, "k": 67, "n": 5, "ta": False, "tb": False},
        {"label": "transpose_a", "batch": (), "m": 9, "k": 17, "n": 3, "ta": True, "tb": False},
        {"label": "transpose_b", "batch": (), "m": 9, "k": 17, "n": 3, "ta": False, "tb": True},
        {
            "label": "both transposed",
            "batch": (2, 2),
            "m": 5,
            "k": 7,
            "n": 6,
            "ta": True,
            "tb": True,
        },
        {
            "label": "strided views",
            "batch": (2,),
            "m": 13,
            "k": 8,
            "n": 65,
            "ta": False,
            "tb": True,
            "layout": "transposed",
        },
        {
            "label": "sliced views",
            "batch": (),
            "m": 31,
            "k": 33,
            "n": 7,
            "ta": True,
            "tb": False,
            "layout": "sliced",
        },
    )
    return OpSpec("matmul", _matmul_params(), build, edge, magnitude=_matmul_magnitude)


def _matmul_magnitude(ex: Example) -> float:
    a, b = ex.args[0].value, ex.args[1].value
    k = a.shape[-2] if ex.kwargs["transpose_a"] else a.shape[-1]
    return max(1.0, k * _rms(a) * _rms(b))


def _concatenate() -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        rng = rng_of(p)
        pieces = [Arr(normal(rng, p["lead"] + (w,)), layout=p["layout"]) for w in p["widths"]]
        return Example(p.get("label", "drawn"), [pieces])

    draw = draw_params(lead=shapes(0, 2), widths=st.lists(SIZES, min_size=1, max_size=4))
    edge = edges(
        {"label": "width-1 pieces", "lead": (3,), "widths": [1, 1, 1]},
        {
            "label": "odd widths, transposed",
            "lead": (5,),
            "widths": [7, 33, 2],
            "layout": "transposed",
        },
        {"label": "one piece", "lead": (2, 3), "widths": [65]},
    )
    return OpSpec("concatenate_last_axis", draw, build, edge)


def _split() -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        x = normal(rng_of(p), p["lead"] + (sum(p["sizes"]),))
        return Example(p.get("label", "drawn"), [Arr(x, layout=p["layout"]), list(p["sizes"])])

    draw = draw_params(lead=shapes(0, 2), sizes=st.lists(SIZES, min_size=1, max_size=4))
    edge = edges(
        {"label": "qkv split", "lead": (4,), "sizes": [33, 33, 33]},
        {"label": "width-1 pieces, sliced", "lead": (3,), "sizes": [1, 2, 1], "layout": "sliced"},
    )
    outs = tuple(f"piece{i}" for i in range(8))
    return OpSpec("split_last_axis", draw, build, edge, outputs=outs)


def _layout_op(op: str, call: Callable[..., Any], dense: bool = False) -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        x = Arr(normal(rng_of(p), p["shape"]), layout=p["layout"])
        return Example(p.get("label", "drawn"), [x])

    if dense:  # the upload itself is under test: dense arrays, exact round trip
        draw = draw_params(shape=shapes(1, 4), layout=st.just("dense"))
        scalar = edges({"label": "0-d (scalar) keeps its shape", "shape": ()})
        return OpSpec(op, draw, build, ELEMENTWISE_EDGES[:3] + scalar, call=call)
    strided = st.sampled_from(("transposed", "permuted", "broadcast", "sliced"))
    draw = draw_params(shape=shapes(2, 4), layout=strided)
    return OpSpec(op, draw, build, ELEMENTWISE_EDGES[3:], call=call)


def _fill() -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        return Example(p.get("label", "drawn"), [Arr(normal(rng_of(p), p["shape"])), p["value"]])

    def call(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return riftco.ops.fill_(*args)

    draw = draw_params(
        shape=shapes(), value=st.sampled_from([0.0, 1.0, -2.5, 1e30]), layout=st.just("dense")
    )
    return OpSpec(
        "fill", draw, build, edges({"label": "long", "shape": (4097,), "value": 3.0}), call=call
    )


PRIMITIVE_SPECS: list[OpSpec] = [
    _layout_op("from_numpy", lambda fn, args, kw: args[0], dense=True),
    _layout_op("to_numpy", lambda fn, args, kw: args[0].numpy()),
    _layout_op("copy_strided", lambda fn, args, kw: args[0].contiguous()),
    _fill(),
    *[_unary(op, gen) for op, gen in UNARY_DOMAINS.items()],
    *[_binary(op, gens) for op, gens in BINARY_DOMAINS.items()],
    _scalar_op("add_scalar", [2.5, 0.0, -1e3]),
    _scalar_op("mul_scalar", [-1.5, 0.0, 1e-3]),
    _scalar_op("pow_scalar", [2.0, 3.0, -1.0, 0.5, 1.5, -2.0, 0.0]),
    _where(),
    _compare(),
    _cast(),
    _reduce("sum"),
    _reduce("max"),
    _argmax(),
    _matmul(),
    _concatenate(),
    _split(),
]
