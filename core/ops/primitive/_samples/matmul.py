"""Conformance data of ``primitive/matmul.py``: every transpose pairing, batches, sizes
past a 64-tile, K = 0 and M = 0, strided and offset views, NaN and inf."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import samples as smp
from ..matmul import matmul


def _draw(d: smp.Draw) -> smp.Params:
    return {
        "batch": tuple(d.choice(smp.SMALL_SIZES) for _ in range(d.integer(0, 2))),
        "m": d.choice(smp.SIZES), "k": d.choice(smp.SIZES), "n": d.choice(smp.SIZES),
        "ta": d.boolean(), "tb": d.boolean(),
    }  # fmt: skip


def _build(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
    rng, b = smp.rng_of(p), tuple(p["batch"])
    a_shape = b + ((p["k"], p["m"]) if p["ta"] else (p["m"], p["k"]))
    b_shape = b + ((p["n"], p["k"]) if p["tb"] else (p["k"], p["n"]))
    lay = p["layout"] if p["layout"] != "broadcast" or b else "dense"
    av, bv = smp.normal(rng, a_shape), smp.normal(rng, b_shape)
    if p.get("special"):
        av = smp.with_specials(av, rng, np.nan, np.inf)
    args = [smp.Arr(av, layout=lay), smp.Arr(bv, layout=str(p.get("layout_b", lay)))]
    return smp.Example(
        smp.label(p), args, {"transpose_a": p["ta"], "transpose_b": p["tb"]}, params=p
    )


def _e(lbl: str, batch: tuple[int, ...], m: int, k: int, n: int, ta: bool, tb: bool,
       **kw: Any) -> smp.Params:  # fmt: skip
    return {"label": lbl, "batch": batch, "m": m, "k": k, "n": n, "ta": ta, "tb": tb, **kw}


EDGES = smp.edges(
    _e("1x1x1", (), 1, 1, 1, False, False),
    _e("odd sizes", (3,), 33, 67, 5, False, False),
    _e("transpose_a", (), 9, 17, 3, True, False),
    _e("transpose_b", (), 9, 17, 3, False, True),
    _e("both transposed", (2, 2), 5, 7, 6, True, True),
    _e("past a 64-tile", (), 130, 70, 129, False, False),
    _e("K = 0", (2,), 3, 0, 4, False, False),
    _e("M = 0", (), 0, 5, 4, False, True),
    _e("strided views", (2,), 13, 8, 65, False, True, layout="transposed"),
    _e("sliced views", (), 31, 33, 7, True, False, layout="sliced"),
    _e("offset x[1:]", (2,), 6, 9, 5, False, False, layout="offset"),
    _e("rows x[:, :k]", (), 7, 6, 11, False, True, layout="rows", layout_b="permuted"),
    _e("NaN and inf in a", (), 6, 5, 4, False, False, special=True),
    # square operands: a kernel that ignores the flag still gets the shapes right
    _e("square b, transpose_b", (), 5, 9, 9, False, True),
    _e("square a, transpose_a", (2,), 7, 7, 3, True, False),
) + smp.past_boundaries_mkn(lambda m, k, n: _e(f"{m}x{k} @ {k}x{n}", (), m, k, n, False, False))


SAMPLES = {
    "matmul": smp.SampleSet(
        smp.Samples(_build, EDGES, _draw, bench=_e("bench", (), 512, 512, 512, False, False)),
        (
            smp.error("matmul_inner_dims", "matmul", lambda t: matmul(t.f(2, 3), t.f(4, 5))),
            smp.error("matmul_transpose_b_dims", "matmul",
                      lambda t: matmul(t.f(2, 3), t.f(3, 5), transpose_b=True)),
            smp.error("matmul_batch_dims", "matmul", lambda t: matmul(t.f(2, 2, 3), t.f(3, 3, 4))),
            smp.error("matmul_rank_1", "matmul", lambda t: matmul(t.f(3), t.f(3, 2))),
            smp.error("matmul_mixed_devices", "matmul",
                      lambda t: matmul(t.f(2, 2), t.other_device(2, 2))),
            smp.error("matmul_index_dtype", "matmul",
                      lambda t: matmul(t.i(2, 2), t.i(2, 2)), "index"),
        ),
    ),
}  # fmt: skip
