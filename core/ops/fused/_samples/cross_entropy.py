"""Conformance data of ``fused/cross_entropy.py``: logits past exp overflow, ignored and
all-ignored targets, boundary targets, long rows, -inf logits off the target, every
layout; targets outside [0, V) other than -1 as domain samples; the host log-sum-exp the
attention samples share."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ... import samples as smp
from ..cross_entropy import cross_entropy, cross_entropy_backward

EDGES = smp.edges(
    {"label": "logits +-1e4 (past exp overflow)", "n": 6, "v": 50, "large": True},
    {"label": "ignored targets (-1)", "n": 9, "v": 7, "ignore": 0.5},
    {"label": "all targets ignored", "n": 4, "v": 5, "ignore": 1.0},
    {"label": "boundary targets", "n": 8, "v": 33, "boundary": True},
    {"label": "long rows (4097)", "n": 2, "v": 4097},
    {"label": "N=1, V=1", "n": 1, "v": 1},
    {"label": "N=0", "n": 0, "v": 5},
    {"label": "-inf logits off the target", "n": 7, "v": 9, "neg_inf": True},
    {"label": "transposed logits", "n": 13, "v": 6, "layout": "transposed"},
    {"label": "offset logits x[1:]", "n": 5, "v": 8, "layout": "offset"},
    {"label": "rows x[:, :k]", "n": 4, "v": 7, "layout": "rows"},
) + smp.past_boundaries(lambda r, c: {"label": f"N={r}, V={c}", "n": r, "v": c})


def _draw(d: smp.Draw) -> smp.Params:
    return {"n": d.choice(smp.SIZES), "v": d.choice(smp.SIZES), "ignore": d.choice((0.0, 0.2)),
            "large": d.boolean()}  # fmt: skip


def _inputs(p: smp.Params) -> tuple[np.ndarray, np.ndarray]:
    rng = smp.rng_of(p)
    n, v = p["n"], p["v"]
    logits = rng.uniform(-1e4, 1e4, (n, v)) if p.get("large") else smp.normal(rng, (n, v), 2.0)
    targets = rng.integers(0, v, size=(n,))
    if p.get("boundary") and n:
        targets[::2], targets[1::2] = 0, v - 1
    targets[rng.random(n) < p.get("ignore", 0.0)] = -1
    if p.get("neg_inf") and v > 1:
        for i, t in enumerate(targets):
            logits[i, (t + 1) % v] = -np.inf  # never the target itself
    return logits, targets


def np_lse(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        m = x.max(axis=-1, keepdims=True) if x.size else np.zeros(x.shape[:-1] + (1,))
        return (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))[..., 0]


def _samples(backward: bool) -> smp.Samples:
    def build(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
        logits, targets = _inputs(p)
        t = smp.Arr(targets, "index", index_dtype=ctx.index_dtype(p["seed"]))
        lg = smp.Arr(logits, layout=p["layout"])
        if not backward:
            return smp.Example(smp.label(p), [lg, t], params=p)
        lse = np_lse(lg.value.astype(ctx.dtype).astype(np.float64))
        dloss = smp.normal(np.random.default_rng(p["seed"] + 1), (p["n"],))
        return smp.Example(
            smp.label(p), [smp.Arr(dloss, "stat"), lg, t, smp.Arr(lse, "stat")], params=p
        )

    return smp.Samples(build, EDGES, _draw, needs_index=True, bench={"n": 1024, "v": 1024})


def _bad_targets(t: Any, value: int) -> Any:
    return t.index_values([1, value, -1])


def bad_index_samples(
    op: str, what: str, run: Any, negative: tuple[str, int]
) -> tuple[smp.ErrorSample, ...]:
    """Domain samples of an op reading rows by index out of V = 5 (cross_entropy's targets,
    embedding's ids): ``run(t, value=v)`` calls it with one bad index ``v``: V itself, the
    op's ``negative`` (name, value) and 2**31 - 1, named ``{op}_{what}_{name}``."""
    bad = (("equal_to_V", 5), negative, ("huge", 2**31 - 1))
    return tuple(
        smp.error(f"{op}_{what}_{name}", op, functools.partial(run, value=v), "index")
        for name, v in bad
    )


def _domain(op: str, run: Any) -> tuple[smp.ErrorSample, ...]:
    return bad_index_samples(op, "target", run, ("minus_2", -2))


SAMPLES = {
    "cross_entropy": smp.SampleSet(
        samples=_samples(False),
        errors=(
            smp.error("float_targets_cross_entropy", "cross_entropy",
                      lambda t: cross_entropy(t.f(4, 5), t.f(4))),
            smp.error("cross_entropy_targets_shape", "cross_entropy",
                      lambda t: cross_entropy(t.f(4, 5), t.i(3)), "index"),
            smp.error("cross_entropy_no_classes", "cross_entropy",
                      lambda t: cross_entropy(t.f(4, 0), t.i(4)), "index"),
        ),
        domain=_domain("cross_entropy",
                       lambda t, value: cross_entropy(t.f(3, 5), _bad_targets(t, value))),
    ),
    "cross_entropy_backward": smp.SampleSet(
        samples=_samples(True),
        errors=(smp.error("cross_entropy_backward_lse_shape", "cross_entropy_backward",
                          lambda t: cross_entropy_backward(t.f(3), t.f(3, 4), t.i(3), t.f(4)),
                      "index"),),
        domain=_domain("cross_entropy_backward",
                       lambda t, value: cross_entropy_backward(t.f(3), t.f(3, 5),
                                                               _bad_targets(t, value), t.f(3))),
    ),
}  # fmt: skip
