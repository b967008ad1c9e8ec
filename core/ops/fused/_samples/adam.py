"""Conformance data of ``fused/adam.py``: the first step (m = v = 0), weight decay at a late
step, empty tensors, and the malformed calls (shapes, views, step 0, beta1 = 1, NaN lr)
that must raise before any state changes."""

from __future__ import annotations

from typing import Any

from ... import samples as smp
from ..adam import adam_update


def _build(p: smp.Params, ctx: smp.Ctx) -> smp.Example:
    rng, s = smp.rng_of(p), p["shape"]
    first = p["step"] == 1
    m = smp.normal(rng, s) * 0.0 if first else 0.1 * smp.normal(rng, s)
    # a real second moment bounds the first (|m| <= sqrt(v)), which keeps updates O(lr)
    v = m * 0.0 if first else m * m + smp.log_uniform(rng, s, 1e-8, 1.0)
    args = [smp.Arr(smp.normal(rng, s)), smp.Arr(smp.normal(rng, s)), smp.Arr(m), smp.Arr(v)]
    return smp.Example(
        smp.label(p),
        args + [p["lr"], *p.get("betas", (0.9, 0.999, 1e-8)), p["wd"], p["step"]],
        params=p,
    )


def _call(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    fn(*args, **kwargs)
    return args[0], args[2], args[3]


def _draw(d: smp.Draw) -> smp.Params:
    return {"shape": d.shape(1, 2), "lr": d.choice((1e-3, 0.1)), "wd": d.choice((0.0, 0.01)),
            "step": d.integer(1, 1000), "layout": "dense"}  # fmt: skip


EDGES = smp.edges(
    {"label": "first step (m = v = 0)", "shape": (33,), "lr": 1e-3, "wd": 0.0, "step": 1},
    {"label": "decay, late step", "shape": (5, 67), "lr": 0.1, "wd": 0.01, "step": 500},
    {"label": "empty", "shape": (0,), "lr": 0.1, "wd": 0.0, "step": 3},
    {"label": "beta1 0.5, beta2 0.9, eps 1e-3", "shape": (4, 9), "lr": 0.1, "wd": 0.01, "step": 4,
     "betas": (0.5, 0.9, 1e-3)},
)  # fmt: skip


SAMPLES = {
    "adam_update": smp.SampleSet(
        samples=smp.Samples(_build, EDGES, _draw, call=_call, layouts=("dense",),
                            bench={"shape": (1 << 20,), "lr": 1e-3, "wd": 0.0, "step": 10}),
        errors=(
            smp.error("adam_update_shapes", "adam_update",
                      lambda t: adam_update(t.f(3), t.f(4), t.f(3), t.f(3), 0.1)),
            smp.error("adam_update_view", "adam_update",
                      lambda t: adam_update(t.f(4, 3).transpose(), t.f(3, 4), t.f(3, 4), t.f(3, 4),
                                        0.1)),
            smp.error("adam_update_step_0", "adam_update",
                      lambda t: adam_update(t.f(3), t.f(3), t.f(3), t.f(3), 0.1, step=0)),
            # 1 / (1 - 1**step): was a ZeroDivisionError
            smp.error("adam_update_beta1_1", "adam_update",
                      lambda t: adam_update(t.f(3), t.f(3), t.f(3), t.f(3), 0.1, beta1=1.0)),
            smp.error("adam_update_lr_nan", "adam_update",
                      lambda t: adam_update(t.f(3), t.f(3), t.f(3), t.f(3), float("nan"))),
        ),
    ),
}  # fmt: skip
