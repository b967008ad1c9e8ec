"""Conformance data of ``fused/embedding.py``: repeated and boundary ids, V = 1, wide rows,
large vocabularies, C = 0, no ids; ids outside [0, V) as domain samples."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import samples as smp
from ..embedding import embedding, embedding_backward
from .cross_entropy import bad_index_samples


def _ids(rng: np.random.Generator, p: smp.Params, shape: tuple[int, ...], v: int) -> np.ndarray:
    ids = rng.integers(0, v, size=shape)
    if p.get("repeated"):
        ids[...] = v // 2
    if p.get("boundary") and ids.size:
        flat = ids.reshape(-1)
        flat[::2] = 0
        flat[1::2] = v - 1
    return ids


EDGES = smp.edges(
    {"label": "repeated ids", "v": 7, "c": 5, "lead": (3, 4), "repeated": True},
    {"label": "many repeats of one id", "v": 3, "c": 9, "lead": (600,), "repeated": True},
    {"label": "boundary ids 0 and V-1", "v": 33, "c": 17, "lead": (9,), "boundary": True},
    {"label": "V=1", "v": 1, "c": 3, "lead": (2, 2)},
    {"label": "T=1", "v": 65, "c": 8, "lead": (1, 1)},
    {"label": "wide rows", "v": 5, "c": 4097, "lead": (3,)},
    {"label": "large vocabulary", "v": 5003, "c": 3, "lead": (40,)},
    {"label": "C=0", "v": 4, "c": 0, "lead": (3,)},
    {"label": "no ids", "v": 4, "c": 5, "lead": (0,)},
    {"label": "transposed", "v": 13, "c": 9, "lead": (2, 3), "layout": "transposed"},
    {"label": "offset x[1:]", "v": 6, "c": 7, "lead": (4,), "layout": "offset"},
) + smp.past_boundaries(
    lambda r, c: {"label": f"{r} ids of width {c}", "v": 7, "c": c, "lead": (r,), "repeated": True}
)


def _draw(d: smp.Draw) -> smp.Params:
    return {"v": d.choice(smp.SIZES), "c": d.choice(smp.SIZES), "lead": d.shape(1, 2),
            "repeated": d.boolean()}  # fmt: skip


def _samples(backward: bool) -> smp.Samples:
    def build(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
        rng = smp.rng_of(p)
        ids = smp.Arr(
            _ids(rng, p, p["lead"], p["v"]), "index", index_dtype=ctx.index_dtype(p["seed"])
        )
        if backward:
            dy = smp.Arr(smp.normal(rng, p["lead"] + (p["c"],)), layout=p["layout"])
            return smp.Example(smp.label(p), [dy, ids, p["v"]], params=p)
        table = smp.Arr(smp.normal(rng, (p["v"], p["c"])), layout=p["layout"])
        return smp.Example(smp.label(p), [table, ids], params=p)

    bench = {"v": 1024, "c": 128, "lead": (1024,)}
    return smp.Samples(build, EDGES, _draw, needs_index=True, bench=bench)


def _bad_ids(t: Any, value: int) -> Any:
    return t.index_values([[1, value], [0, 2]])


def _domain(op: str, run: Any) -> tuple[smp.ErrorSample, ...]:
    return bad_index_samples(op, "id", run, ("negative", -1))


SAMPLES = {
    "embedding": smp.SampleSet(
        samples=_samples(False),
        errors=(
            smp.error("float_ids_embedding", "embedding", lambda t: embedding(t.f(5, 3), t.f(4))),
            smp.error("embedding_table_rank", "embedding",
                      lambda t: embedding(t.f(5), t.i(2)), "index"),
        ),
        domain=_domain("embedding", lambda t, value: embedding(t.f(5, 3), _bad_ids(t, value))),
    ),
    "embedding_backward": smp.SampleSet(
        samples=_samples(True),
        errors=(
            smp.error("embedding_backward_shapes", "embedding_backward",
                      lambda t: embedding_backward(t.f(3, 4), t.i(2), 5), "index"),
            smp.error("embedding_backward_num", "embedding_backward",
                      lambda t: embedding_backward(t.f(2, 4), t.i(2), 0), "index"),
        ),
        domain=_domain("embedding_backward",
                       lambda t, value: embedding_backward(t.f(2, 2, 3), _bad_ids(t, value), 5)),
    ),
}  # fmt: skip
