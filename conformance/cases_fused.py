"""Numeric cases for the fused ops, forward and backward.

Backward ops receive *consistent* saved values (softmax outputs, LayerNorm statistics,
log-sum-exps, attention probabilities) computed here with plain float64 numpy from the
drawn forward inputs, so a backend that relies on those invariants is tested fairly.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import strategies as st

from .cases import SEEDS, SIZES, SMALL_SIZES, Ctx, OpSpec, draw_params, edges, rng_of, shapes
from .inputs import Arr, Example, log_uniform, normal


# -- host math for saved values ----------------------------------------------------------------
def np_softmax(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def np_lse(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=-1, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))[..., 0]


def np_scores(q: np.ndarray, k: np.ndarray, scale: float, causal: bool) -> np.ndarray:
    s = scale * q @ np.swapaxes(k, -1, -2)
    if causal:
        t = s.shape[-1]
        s = np.where(np.triu(np.ones((t, t), dtype=bool), 1), -np.inf, s)
    return s


def _label(p: dict[str, Any]) -> str:
    return str(p.get("label", "drawn"))


# -- GELU, softmax, LayerNorm ------------------------------------------------------------
ROW_EDGES = edges(
    {"label": "long row (4097)", "shape": (2, 4097)},
    {"label": "size-1 axes", "shape": (1, 1, 1)},
    {"label": "T=1", "shape": (1, 1, 33)},
    {"label": "odd sizes", "shape": (3, 5, 67)},
    {"label": "transposed", "shape": (9, 33), "layout": "transposed"},
    {"label": "broadcast", "shape": (4, 17), "layout": "broadcast"},
    {"label": "sliced", "shape": (3, 65), "layout": "sliced"},
)


def _gelu(backward: bool) -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        rng = rng_of(p)
        x = normal(rng, p["shape"], 8.0 if p.get("large") else 2.0)
        args = [Arr(x, layout=p["layout"])]
        if backward:
            args.insert(0, Arr(normal(rng, p["shape"]), layout=p["layout"]))
        return Example(_label(p), args, {"approximate": p["approximate"]})

    approx = st.sampled_from(("tanh", "none"))
    edge = tuple({**e, "approximate": a} for e in ROW_EDGES[:4] for a in ("tanh", "none"))
    edge += edges({"label": "large |x|", "shape": (3, 40), "large": True, "approximate": "none"})
    op = "gelu_backward" if backward else "gelu"
    return OpSpec(op, draw_params(shape=shapes(), approximate=approx), build, edge, fused=True)


def _softmax_input(p: dict[str, Any]) -> np.ndarray:
    rng = rng_of(p)
    x = normal(rng, p["shape"], 3.0)
    if p.get("large"):
        x = rng.uniform(-80.0, 80.0, p["shape"])
    if p.get("neg_inf") and x.shape[-1] > 1:
        x[..., 1::2] = -np.inf  # every row keeps its first entry finite
    if p.get("all_inf_row"):
        x.reshape(-1, x.shape[-1])[0] = -np.inf  # softmax of an all -inf row is NaN
    return x


SOFTMAX_EDGES = ROW_EDGES + edges(
    {"label": "large logits (+-80)", "shape": (4, 100), "large": True},
    {"label": "rows with -inf", "shape": (5, 33), "neg_inf": True},
    {"label": "all -inf row gives NaN", "shape": (3, 7), "all_inf_row": True},
    {"label": "width 1", "shape": (6, 1)},
)


def _softmax() -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        return Example(_label(p), [Arr(_softmax_input(p), layout=p["layout"])])

    return OpSpec("softmax", draw_params(shape=shapes()), build, SOFTMAX_EDGES, fused=True)


def _softmax_backward() -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        y = np_softmax(_softmax_input(p))
        dy = normal(np.random.default_rng(p["seed"] + 1), p["shape"])
        return Example(_label(p), [Arr(dy, layout=p["layout"]), Arr(y, layout=p["layout"])])

    edge = tuple(e for e in SOFTMAX_EDGES if "all_inf_row" not in e)
    return OpSpec("softmax_backward", draw_params(shape=shapes()), build, edge, fused=True)


def _ln_inputs(p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = rng_of(p)
    shape = p["shape"]
    x = normal(rng, shape) + p.get("offset", 0.0)
    gamma = 1.0 + 0.1 * normal(rng, shape[-1:])
    beta = 0.1 * normal(rng, shape[-1:])
    return x, gamma, beta


LN_EDGES = ROW_EDGES + edges(
    {"label": "mean offset 10", "shape": (4, 257), "offset": 10.0},
    {"label": "width 1 (zero variance)", "shape": (5, 1)},
)


def _layer_norm() -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        x, gamma, beta = _ln_inputs(p)
        return Example(_label(p), [Arr(x, layout=p["layout"]), Arr(gamma), Arr(beta), p["eps"]])

    draw = draw_params(shape=shapes(), eps=st.sampled_from([1e-5, 1e-3]))
    edge = tuple({**e, "eps": 1e-5} for e in LN_EDGES)
    return OpSpec("layer_norm", draw, build, edge, fused=True, outputs=("y", "mean", "rstd"))


def _layer_norm_backward() -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        x_raw, gamma, _ = _ln_inputs(p)
        lay = p["layout"]
        x = Arr(x_raw, layout=lay)  # a broadcast layout changes the values: use x.value
        xr = x.value.astype(ctx.dtype).astype(np.float64)  # statistics of what the op sees
        mean = xr.mean(axis=-1)
        rstd = 1.0 / np.sqrt(((xr - mean[..., None]) ** 2).mean(axis=-1) + 1e-5)
        dy = normal(np.random.default_rng(p["seed"] + 1), p["shape"])
        args = [Arr(dy, layout=lay), x, Arr(gamma), Arr(mean), Arr(rstd)]
        return Example(_label(p), args)

    outs = ("dx", "dgamma", "dbeta")
    return OpSpec(
        "layer_norm_backward",
        draw_params(shape=shapes()),
        build,
        LN_EDGES,
        fused=True,
        outputs=outs,
    )


# -- embedding and cross-entropy ----------------------------------------------------------------
def _ids(rng: np.random.Generator, p: dict[str, Any], shape: tuple[int, ...], v: int) -> np.ndarray:
    ids = rng.integers(0, v, size=shape)
    if p.get("repeated"):
        ids[...] = v // 2
    if p.get("boundary") and ids.size:
        flat = ids.reshape(-1)
        flat[::2] = 0
        flat[1::2] = v - 1
    return ids


EMB_EDGES = edges(
    {"label": "repeated ids", "v": 7, "c": 5, "lead": (3, 4), "repeated": True},
    {"label": "boundary ids 0 and V-1", "v": 33, "c": 17, "lead": (9,), "boundary": True},
    {"label": "V=1", "v": 1, "c": 3, "lead": (2, 2)},
    {"label": "T=1", "v": 65, "c": 8, "lead": (1, 1)},
    {"label": "wide rows", "v": 5, "c": 4097, "lead": (3,)},
    {"label": "transposed table", "v": 13, "c": 9, "lead": (2, 3), "layout": "transposed"},
)
EMB_DRAW = draw_params(v=SIZES, c=SIZES, lead=shapes(1, 2), repeated=st.booleans())


def _embedding(backward: bool) -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        rng = rng_of(p)
        ids = Arr(_ids(rng, p, p["lead"], p["v"]), "index", index_dtype=ctx.index_dtype(p["seed"]))
        if backward:
            dy = Arr(normal(rng, p["lead"] + (p["c"],)), layout=p["layout"])
            return Example(_label(p), [dy, ids, p["v"]])
        table = Arr(normal(rng, (p["v"], p["c"])), layout=p["layout"])
        return Example(_label(p), [table, ids])

    if not backward:
        return OpSpec("embedding", EMB_DRAW, build, EMB_EDGES, fused=True, needs_index=True)
    return OpSpec(
        "embedding_backward",
        EMB_DRAW,
        build,
        EMB_EDGES,
        fused=True,
        needs_index=True,
        magnitude=_scatter_magnitude,
    )


def _scatter_magnitude(ex: Example) -> float:
    """Repeated ids accumulate: error grows with the most frequent id's count."""
    dy, ids = ex.args[0].value, ex.args[1].value
    count = int(np.bincount(ids.reshape(-1)).max()) if ids.size else 1
    return max(1.0, count * float(np.sqrt(np.mean(dy * dy))))


CE_EDGES = edges(
    {"label": "large logits (+-80)", "n": 6, "v": 50, "large": True},
    {"label": "ignored targets (-1)", "n": 9, "v": 7, "ignore": 0.5},
    {"label": "all targets ignored", "n": 4, "v": 5, "ignore": 1.0},
    {"label": "boundary targets", "n": 8, "v": 33, "boundary": True},
    {"label": "long rows (4097)", "n": 2, "v": 4097},
    {"label": "N=1, V=1", "n": 1, "v": 1},
    {"label": "transposed logits", "n": 13, "v": 6, "layout": "transposed"},
)
CE_DRAW = draw_params(n=SIZES, v=SIZES, ignore=st.sampled_from([0.0, 0.2]), large=st.booleans())


def _ce_inputs(p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    rng = rng_of(p)
    n, v = p["n"], p["v"]
    logits = rng.uniform(-80, 80, (n, v)) if p.get("large") else normal(rng, (n, v), 2.0)
    targets = _ids(rng, p, (n,), v)
    targets[rng.random(n) < p.get("ignore", 0.0)] = -1
    return logits, targets


def _cross_entropy(backward: bool) -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        logits, targets = _ce_inputs(p)
        t = Arr(targets, "index", index_dtype=ctx.index_dtype(p["seed"]))
        lg = Arr(logits, layout=p["layout"])
        if not backward:
            return Example(_label(p), [lg, t])
        lse = np_lse(lg.value.astype(ctx.dtype).astype(np.float64))
        dloss = normal(np.random.default_rng(p["seed"] + 1), (p["n"],))
        return Example(_label(p), [Arr(dloss), lg, t, Arr(lse)])

    op = "cross_entropy_backward" if backward else "cross_entropy"
    outs = ("dlogits",) if backward else ("loss_rows", "lse")
    return OpSpec(op, CE_DRAW, build, CE_EDGES, fused=True, outputs=outs, needs_index=True)


# -- attention ------------------------------------------------------------------------------------
ATT_EDGES = edges(
    {"label": "T=1", "b": 1, "h": 2, "t": 1, "d": 8, "causal": True},
    {"label": "T=67 (past one 64-tile)", "b": 1, "h": 1, "t": 67, "d": 5, "causal": True},
    {"label": "D=1", "b": 2, "h": 1, "t": 9, "d": 1, "causal": True},
    {"label": "not causal", "b": 1, "h": 3, "t": 17, "d": 7, "causal": False},
    {
        "label": "heads permuted from [B,T,H,D]",
        "b": 2,
        "h": 3,
        "t": 13,
        "d": 4,
        "causal": True,
        "layout": "permuted",
    },
    {"label": "transposed", "b": 1, "h": 2, "t": 6, "d": 6, "causal": True, "layout": "transposed"},
)
ATT_DRAW = draw_params(
    b=SMALL_SIZES,
    h=SMALL_SIZES,
    d=st.sampled_from([1, 3, 8, 16, 33]),
    t=st.sampled_from([1, 2, 3, 5, 17, 33, 64, 65]),
    causal=st.booleans(),
    layout=st.sampled_from(("dense", "dense", "permuted", "sliced")),
)


def _attention(name: str) -> OpSpec:
    backward = name.endswith("_backward")
    flash = name.startswith("flash")

    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        rng = rng_of(p)
        shape = (p["b"], p["h"], p["t"], p["d"])
        q, k, v = (normal(rng, shape) for _ in range(3))
        scale = 1.0 / math.sqrt(p["d"])
        lay = p["layout"]
        qkv = [Arr(q, layout=lay), Arr(k, layout=lay), Arr(v, layout=lay)]
        if not backward:
            return Example(_label(p), [*qkv, scale], {"causal": p["causal"]})
        qr, kr, vr = (a.astype(ctx.dtype).astype(np.float64) for a in (q, k, v))
        s = np_scores(qr, kr, scale, p["causal"])
        probs = np_softmax(s)
        dout = Arr(normal(rng, shape), layout=lay)
        if not flash:
            return Example(_label(p), [dout, *qkv, Arr(probs), scale])
        out, lse = probs @ vr, np_lse(s)
        return Example(_label(p), [dout, *qkv, Arr(out), Arr(lse), scale], {"causal": p["causal"]})

    if not backward:
        outs: tuple[str, ...] = ("out", "lse") if flash else ("out", "probs")
    else:
        outs = ("dq", "dk", "dv")
    return OpSpec(name, ATT_DRAW, build, ATT_EDGES, fused=True, outputs=outs)


# -- optimizer ------------------------------------------------------------------------------------
def _adam() -> OpSpec:
    def build(p: dict[str, Any], ctx: Ctx) -> Example:
        rng, s = rng_of(p), p["shape"]
        first = p["step"] == 1
        m = np.zeros(s) if first else 0.1 * normal(rng, s)
        # a real second moment bounds the first (|m| <= sqrt(v)), which keeps updates O(lr)
        v = np.zeros(s) if first else m * m + log_uniform(rng, s, 1e-8, 1.0)
        args = [Arr(normal(rng, s)), Arr(normal(rng, s)), Arr(m), Arr(v)]
        hyper = [p["lr"], 0.9, 0.999, 1e-8, p["wd"], p["step"]]
        return Example(_label(p), args + hyper)

    def call(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        fn(*args, **kwargs)
        return args[0], args[2], args[3]

    draw = st.fixed_dictionaries(
        {
            "seed": SEEDS,
            "layout": st.just("dense"),
            "shape": shapes(1, 2),
            "lr": st.sampled_from([1e-3, 0.1]),
            "wd": st.sampled_from([0.0, 0.01]),
            "step": st.integers(1, 1000),
        }
    )
    edge = edges(
        {"label": "first step (m = v = 0)", "shape": (33,), "lr": 1e-3, "wd": 0.0, "step": 1},
        {"label": "decay, late step", "shape": (5, 67), "lr": 0.1, "wd": 0.01, "step": 500},
    )
    return OpSpec(
        "adam_update", draw, build, edge, fused=True, outputs=("param", "m", "v"), call=call
    )


FUSED_SPECS: list[OpSpec] = [
    _gelu(False),
    _gelu(True),
    _softmax(),
    _softmax_backward(),
    _layer_norm(),
    _layer_norm_backward(),
    _embedding(False),
    _embedding(True),
    _cross_entropy(False),
    _cross_entropy(True),
    *[
        _attention(n)
        for n in ("attention", "attention_backward", "flash_attention", "flash_attention_backward")
    ],
    _adam(),
]
