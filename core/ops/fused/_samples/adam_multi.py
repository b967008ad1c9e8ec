"""Conformance data of ``fused/adam_multi.py``: one tensor and many (more than one launch's
worth on kernel backends), the clip below and above its limit, NaN and infinite norms, an
empty tensor among others, a 0-d parameter, no tensors at all, strided gradients, and the
malformed calls (lengths, shapes, views, mixed dtypes or devices, a storage listed twice,
a bad norm or limit) that must raise before any state changes."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import samples as smp
from ..adam_multi import adam_update_multi


def _state(rng: np.random.Generator, s: tuple[int, ...], step: int) -> tuple[Any, Any]:
    if step == 1:
        return np.zeros(s), np.zeros(s)
    m = 0.1 * smp.normal(rng, s)
    return m, m * m + smp.log_uniform(rng, s, 1e-8, 1.0)  # |m| <= sqrt(v): updates stay O(lr)


def _build(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
    rng, step = smp.rng_of(p), p["step"]
    params, grads, ms, vs = [], [], [], []
    for s in p["shapes"]:
        m, v = _state(rng, s, step)
        params.append(smp.Arr(smp.normal(rng, s)))
        grads.append(smp.Arr(smp.normal(rng, s), layout=p["layout"]))
        ms.append(smp.Arr(m))
        vs.append(smp.Arr(v))
    true = float(np.sqrt(sum(float(np.sum(g.value**2)) for g in grads)))
    clip, norm, limit = p["clip"], None, 1.0
    if clip == "above":  # scale ~ 0.3: the scale must reach m, v and the update
        norm, limit = smp.Arr(np.array(true)), max(0.3 * true, 1e-3)
    elif clip == "below":  # scale exactly 1
        norm, limit = smp.Arr(np.array(true)), 2.0 * true + 1.0
    elif clip in ("nan", "inf"):
        norm = smp.Arr(np.array(float(clip)))
    hyper = [p["lr"], *p.get("betas", (0.9, 0.999, 1e-8)), p["wd"], step]
    return smp.Example(smp.label(p), [params, grads, ms, vs, *hyper, norm, limit], params=p)


def _call(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    fn(*args, **kwargs)
    return [*args[0], *args[2], *args[3]]  # every written tensor: params, ms, vs


def _draw(d: smp.Draw) -> smp.Params:
    count = d.integer(1, 9)
    shapes = [tuple(d.choice(smp.SIZES) for _ in range(d.integer(0, 2))) for _ in range(count)]
    return {"shapes": shapes, "lr": d.choice((1e-3, 0.1)), "wd": d.choice((0.0, 0.01)),
            "step": d.integer(1, 1000), "clip": d.choice((None, "above", "below")),
            "layout": d.choice(("dense", "dense", "transposed", "sliced", "offset"))}  # fmt: skip


_MANY = [(5, 3), (7,), (1,), (33,), (2, 2), (65,), (3, 3), (8,), (13,), (4, 31), (2,), (9,), (17,)]
EDGES = smp.edges(
    {"label": "one tensor, first step", "shapes": [(33,)], "lr": 1e-3, "wd": 0.0, "step": 1,
     "clip": None},
    {"label": "13 tensors, clipped, decay, late step", "shapes": _MANY, "lr": 0.1, "wd": 0.01,
     "step": 500, "clip": "above"},
    {"label": "norm below the limit (scale 1)", "shapes": [(5, 67), (3,)], "lr": 0.1,
     "wd": 0.01, "step": 3, "clip": "below"},
    {"label": "NaN norm: everything NaN", "shapes": [(5,), (2, 3)], "lr": 0.1, "wd": 0.0,
     "step": 2, "clip": "nan"},
    {"label": "infinite norm: scale 0", "shapes": [(5,), (2, 3)], "lr": 0.1, "wd": 0.01,
     "step": 2, "clip": "inf"},
    {"label": "an empty tensor among others", "shapes": [(3,), (0,), (2, 0), (4,)],
     "lr": 0.1, "wd": 0.0, "step": 3, "clip": "above"},
    {"label": "0-d parameter", "shapes": [(), (3,)], "lr": 0.1, "wd": 0.01, "step": 4,
     "clip": "above"},
    {"label": "no tensors", "shapes": [], "lr": 0.1, "wd": 0.0, "step": 1, "clip": "above"},
    {"label": "large and small (parallel pass)", "shapes": [(700, 800), (3,), (9000,)],
     "lr": 1e-3, "wd": 0.01, "step": 7, "clip": "above"},
    {"label": "strided gradients", "shapes": [(4, 5), (6,)], "lr": 0.1, "wd": 0.0, "step": 5,
     "clip": "above", "layout": "transposed"},
    {"label": "beta1 0.5, beta2 0.9, eps 1e-3", "shapes": [(4, 9), (5,)], "lr": 0.1,
     "wd": 0.01, "step": 4, "clip": "below", "betas": (0.5, 0.9, 1e-3)},
)  # fmt: skip


def _lists(t: Any, *shapes: tuple[int, ...]) -> list[list[Any]]:
    return [[t.f(*s) for s in shapes] for _ in range(4)]


def _with(lists: list[list[Any]], which: int, i: int, x: Any) -> list[list[Any]]:
    out = [list(x) for x in lists]
    out[which][i] = x
    return out


def _run(lists: list[list[Any]], lr: float = 0.1, **kwargs: Any) -> None:
    params, grads, ms, vs = lists
    adam_update_multi(params, grads, ms, vs, lr, **kwargs)


def _twice(t: Any) -> None:
    p = t.f(3)
    lists = _lists(t, (3,), (3,))
    lists[0] = [p, p]
    _run(lists)


SAMPLES = {
    "adam_update_multi": smp.SampleSet(
        samples=smp.Samples(_build, EDGES, _draw, call=_call,
                            layouts=("dense", "transposed", "sliced", "offset"),
                        bench={"shapes": [(1 << 16,)] * 16, "lr": 1e-3, "wd": 0.0,
                               "step": 10, "clip": "above"}),
        errors=(
            smp.error("adam_update_multi_lengths", "adam_update_multi",
                      lambda t: adam_update_multi([t.f(3)], [t.f(3)], [t.f(3)], [], 0.1)),
            smp.error("adam_update_multi_shapes", "adam_update_multi",
                      lambda t: _run(_with(_lists(t, (3,), (4,)), 1, 1, t.f(5)))),
            smp.error("adam_update_multi_view", "adam_update_multi",
                      lambda t: _run(_with(_lists(t, (3,), (3, 4)), 0, 1, t.f(4, 3).transpose()))),
            smp.error("adam_update_multi_not_a_list", "adam_update_multi",
                      lambda t: adam_update_multi(t.f(3), [t.f(3)], [t.f(3)], [t.f(3)], 0.1)),
            smp.error("adam_update_multi_mixed_devices", "adam_update_multi",
                      lambda t: _run(_with(_lists(t, (3,), (3,)), 2, 1, t.other_device(3)))),
            smp.error("adam_update_multi_mixed_dtypes", "adam_update_multi",
                      lambda t: _run(_with(_lists(t, (3,), (3,)), 3, 0, t.other_float(3))),
                  "other_float"),
            smp.error("adam_update_multi_norm_dtype", "adam_update_multi",
                      lambda t: _run(_lists(t, (3,)), grad_norm=t.other_float(), max_norm=1.0),
                  "other_float"),
            smp.error("adam_update_multi_listed_twice", "adam_update_multi", _twice),
            smp.error("adam_update_multi_norm_shape", "adam_update_multi",
                      lambda t: _run(_lists(t, (3,)), grad_norm=t.f(1), max_norm=1.0)),
            smp.error("adam_update_multi_max_norm_0", "adam_update_multi",
                      lambda t: _run(_lists(t, (3,)), grad_norm=t.f(), max_norm=0.0)),
            smp.error("adam_update_multi_step_0", "adam_update_multi",
                      lambda t: _run(_lists(t, (3,)), step=0)),
            smp.error("adam_update_multi_lr_nan", "adam_update_multi",
                      lambda t: _run(_lists(t, (3,)), float("nan"))),
        ),
    ),
}  # fmt: skip
