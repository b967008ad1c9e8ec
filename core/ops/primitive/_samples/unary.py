"""Conformance data of ``primitive/unary.py``: each op's own domain (log and sqrt of
positives), magnitudes past float32 overflow, NaN, infinities and signed zeros."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import samples as smp
from .. import unary


def elementwise_edges(
    empty: tuple[int, ...], vector: smp.Params, *extra: smp.Params
) -> tuple[smp.Params, ...]:
    """Shapes every elementwise op meets (unary and binary): size-1 axes, odd sizes, a long
    row, 0-d, the op's ``empty`` shape, each layout, a stride-0 vector as large as its
    buffer (the op's ``vector`` layouts), the op's ``extra`` edges, then NaN and +-inf."""
    return smp.edges(
        {"label": "size-1 axes", "shape": (1, 1, 1)},
        {"label": "odd sizes", "shape": (3, 67)},
        {"label": "long row", "shape": (2, 4097)},
        {"label": "0-d", "shape": ()},
        {"label": "empty", "shape": empty},
        {"label": "transposed", "shape": (5, 33), "layout": "transposed"},
        {"label": "permuted", "shape": (2, 3, 5), "layout": "permuted"},
        {"label": "broadcast", "shape": (4, 9), "layout": "broadcast"},
        {"label": "vector: stride 0 over a buffer as large as the view", "shape": (9,), **vector},
        {"label": "sliced", "shape": (3, 17), "layout": "sliced"},
        {"label": "offset x[1:]", "shape": (6, 7), "layout": "offset"},
        {"label": "rows x[:, :k]", "shape": (5, 9), "layout": "rows"},
        *extra,
        {"label": "NaN and +-inf", "shape": (4, 33), "special": True},
    )


EDGES = elementwise_edges((4, 0), {"layout": "broadcast"})

DOMAINS: dict[str, Any] = {
    "neg": lambda r, s: smp.normal(r, s, 3.0),
    "exp": lambda r, s: smp.normal(r, s, 3.0),
    "log": lambda r, s: smp.log_uniform(r, s, 1e-3, 1e3),
    "sqrt": lambda r, s: smp.log_uniform(r, s, 1e-4, 1e4),
    "rsqrt": lambda r, s: smp.log_uniform(r, s, 1e-4, 1e4),
    "tanh": lambda r, s: smp.normal(r, s, 3.0),
    "abs": lambda r, s: smp.normal(r, s, 3.0),
}
#: Magnitudes that stress range reduction and overflow (exp past float32's 88.7 gives inf).
LARGE = {"exp": 100.0, "tanh": 1e4, "neg": 1e30, "abs": 1e30}


def samples(op: str) -> smp.Samples:
    gen = DOMAINS[op]

    def build(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
        rng = smp.rng_of(p)
        value = gen(rng, p["shape"])
        if p.get("large"):
            value = rng.uniform(-LARGE[op], LARGE[op], p["shape"])
        if p.get("special"):
            value = smp.with_specials(value, rng, np.nan, np.inf, -np.inf, 0.0, -0.0)
        return smp.Example(smp.label(p), [smp.Arr(value, layout=p["layout"])], params=p)

    def draw(d: smp.Draw) -> smp.Params:
        return {"shape": d.shape(), "large": op in LARGE and d.boolean()}

    extra: tuple[smp.Params, ...] = ()
    if op in LARGE:
        extra = smp.edges({"label": f"large magnitude (+-{LARGE[op]:g})", "shape": (4, 33),
                       "large": True})  # fmt: skip
    return smp.Samples(build, EDGES + extra, draw, bench={"shape": (1024, 1024)})


def _sample_set(name: str) -> smp.SampleSet:
    fn = getattr(unary, name)
    return smp.SampleSet(samples(name), (
        smp.error(f"{name}_of_index_dtype", name, lambda t: fn(t.i(3)), "index"),
        smp.error(f"{name}_of_list", name, lambda t: fn([1.0, 2.0])),
    ))  # fmt: skip


SAMPLES = {name: _sample_set(name) for name in DOMAINS}
