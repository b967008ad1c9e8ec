"""``adam_update_multi`` and its use by AdamW and the trainer, against float64 numpy.

The reference below is written from the op's specification (AdamW, bias-corrected,
decoupled decay, gradients scaled by max_norm / max(norm + 1e-6, max_norm)), not from any
backend. The OpenCL part runs the kernel plan (several launches of six tensors) when a
device is there.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import riftco
from helpers import cpu_native_opencl
from riftco import ops
from riftco.autograd import Variable
from riftco.errors import DeviceMismatchError, DTypeError, ShapeError
from riftco.kernel_host.fused_adam_multi import segment_groups
from riftco.optim import AdamW, clip_grad_norm, grad_norm

SHAPES = [(5, 3), (7,), (), (33,), (0,), (2, 2), (65,), (3, 3), (8,), (13,), (4, 31), (2,), (9,)]
HYPER = dict(lr=0.05, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.01)


def _reference(p, g, m, v, step, scale, lr, beta1, beta2, eps, weight_decay):
    """One AdamW step in float64 from the formulas."""
    g = g * scale
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    mhat, vhat = m / (1 - beta1**step), v / (1 - beta2**step)
    return p - lr * (mhat / (np.sqrt(vhat) + eps) + weight_decay * p), m, v


def _arrays(seed: int = 0) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s) for s in SHAPES] for _ in range(2)]


@pytest.mark.parametrize("backend", cpu_native_opencl())
@pytest.mark.parametrize("clip", [None, 0.5, 1e6])
def test_three_steps_match_float64_math(backend: str, clip: float | None) -> None:
    dtype = np.float64 if backend != "opencl" else np.float32
    dev = riftco.device(backend)
    ps0, gs0 = _arrays()
    up = lambda a: riftco.tensor(np.asarray(a, dtype=dtype), device=dev)  # noqa: E731
    ps, ms, vs = [up(a) for a in ps0], [up(a * 0) for a in ps0], [up(a * 0) for a in ps0]
    ref = [(a.copy(), a * 0, a * 0) for a in ps0]
    for step in (1, 2, 3):
        gs_host = [g * (step + 0.5) for g in gs0]
        norm_value = float(np.sqrt(sum(np.sum(g * g) for g in gs_host)))
        norm = None if clip is None else up(np.array(norm_value))
        ops.adam_update_multi(ps, [up(g) for g in gs_host], ms, vs, step=step, grad_norm=norm,
                              max_norm=clip or 1.0, **HYPER)  # fmt: skip
        scale = 1.0 if clip is None else clip / max(norm_value + 1e-6, clip)
        ref = [_reference(p, g, m, v, step, scale, **HYPER)
               for (p, m, v), g in zip(ref, gs_host, strict=True)]  # fmt: skip
    rtol, atol = (1e-12, 1e-13) if dtype == np.float64 else (2e-5, 2e-6)
    for got, (p, m, v) in zip(zip(ps, ms, vs, strict=True), ref, strict=True):
        for t, want in zip(got, (p, m, v), strict=True):
            np.testing.assert_allclose(t.numpy(), want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("backend", ["cpu", "native"])
def test_special_norms(backend: str) -> None:
    """NaN norm: every written element NaN; infinite norm: scale 0, only decay and the
    moments' memory move the parameter."""
    dev = riftco.device(backend)
    rng = np.random.default_rng(1)
    p0, g0, m0 = rng.standard_normal((3, 4))
    v0 = m0 * m0 + 0.5
    for norm, check in ((np.nan, "nan"), (np.inf, "zero")):
        p, m, v = (riftco.tensor(a.copy(), device=dev) for a in (p0, m0, v0))
        g = riftco.tensor(g0, device=dev)
        n = riftco.tensor(np.float64(norm), device=dev)
        ops.adam_update_multi([p], [g], [m], [v], step=4, grad_norm=n, max_norm=1.0, **HYPER)
        if check == "nan":
            assert all(np.isnan(t.numpy()).all() for t in (p, m, v))
        else:
            want = _reference(p0, g0, m0, v0, 4, 0.0, **HYPER)
            for t, w in zip((p, m, v), want, strict=True):
                np.testing.assert_allclose(t.numpy(), w, rtol=1e-13, atol=1e-15)


def test_versions_bumped_and_empty_lists_are_a_no_op() -> None:
    p, g, m, v = (riftco.tensor(np.ones(3)) for _ in range(4))
    before = [t.version for t in (p, m, v)]
    ops.adam_update_multi([p], [g], [m], [v], lr=0.1)
    assert all(t.version > b for t, b in zip((p, m, v), before, strict=True))
    assert g.numpy().tolist() == [1.0, 1.0, 1.0]
    ops.adam_update_multi([], [], [], [], lr=0.1)  # nothing to do, no backend to ask


def test_bad_calls_change_nothing() -> None:
    cpu, nat = riftco.device("cpu"), riftco.device("native")
    p, g, m, v = (riftco.tensor(np.ones(3), device=cpu) for _ in range(4))
    other = riftco.tensor(np.ones(3), device=nat)
    with pytest.raises(DeviceMismatchError, match=r"^\[adam_update_multi\]"):
        ops.adam_update_multi([p, other], [g, g], [m, other], [v, other], lr=0.1)
    with pytest.raises(DTypeError, match=r"^\[adam_update_multi\]"):
        ops.adam_update_multi([p], [g.numpy().astype(np.float32)], [m], [v], lr=0.1)  # type: ignore[list-item]
    f32 = riftco.tensor(np.ones(3, dtype=np.float32))
    with pytest.raises(DTypeError, match=r"^\[adam_update_multi\]"):
        ops.adam_update_multi([p], [f32], [m], [v], lr=0.1)
    with pytest.raises(ShapeError, match="listed twice"):
        ops.adam_update_multi([p, m], [g, g], [m, v], [v, p], lr=0.1)
    assert all(t.numpy().tolist() == [1.0] * 3 for t in (p, m, v, other))


def test_segment_groups_skip_empty_tensors_and_fill_six() -> None:
    assert segment_groups([3, 0, 5, 1, 1, 1, 1, 1, 2]) == [[0, 2, 3, 4, 5, 6], [7, 8]]
    assert segment_groups([0, 0]) == []
    assert segment_groups([2**30, 2**30, 5]) == [[0], [1, 2]]  # int32 thread indices


def _model_params(dev: Any, seed: int = 0) -> list[Variable]:
    rng = np.random.default_rng(seed)
    return [Variable(riftco.tensor(rng.standard_normal(s).astype(np.float32), device=dev),
                     requires_grad=True) for s in SHAPES]  # fmt: skip


@pytest.mark.parametrize("backend", ["cpu", "native"])
def test_adamw_clipping_inside_matches_float64_math(backend: str) -> None:
    """AdamW.step(grad_norm=...) over many parameters (one multi-tensor call), two steps,
    against the formulas in float64 on the same float32 inputs."""
    dev = riftco.device(backend)
    params = _model_params(dev)
    host = [p.value.numpy().astype(np.float64) for p in params]
    state = [(np.zeros_like(a), np.zeros_like(a)) for a in host]
    opt = AdamW(params, lr=0.05, betas=(0.9, 0.99), weight_decay=0.01)
    rng = np.random.default_rng(5)
    for step in (1, 2):
        gs = [rng.standard_normal(p.shape).astype(np.float32) for p in params]
        for p, g in zip(params, gs, strict=True):
            p.grad = riftco.tensor(g, device=dev)
        norm = grad_norm(params)
        value = float(np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in gs)))
        np.testing.assert_allclose(float(norm.item()), value, rtol=1e-6)
        opt.step(grad_norm=norm, max_norm=1.0)
        scale = 1.0 / max(value + 1e-6, 1.0)
        for i, g in enumerate(gs):
            host[i], *st = _reference(host[i], g.astype(np.float64), *state[i], step, scale,
                                      lr=0.05, beta1=0.9, beta2=0.99, eps=1e-8,
                                      weight_decay=0.01)  # fmt: skip
            state[i] = (st[0], st[1])
    for p, want in zip(params, host, strict=True):
        np.testing.assert_allclose(p.value.numpy(), want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("backend", ["cpu", "native"])
def test_clipping_inside_gives_the_bits_of_a_scaling_pass(backend: str) -> None:
    """The property the trainer relies on (losses identical to the two-pass step): the
    clip scale inside the update rounds exactly as clip_grad_norm's scaling pass."""
    dev = riftco.device(backend)
    a, b = _model_params(dev), _model_params(dev)
    rng = np.random.default_rng(9)
    gs = [rng.standard_normal(p.shape).astype(np.float32) * 3 for p in a]
    for params in (a, b):
        for p, g in zip(params, gs, strict=True):
            p.grad = riftco.tensor(g, device=dev)
    fused = AdamW(a, lr=0.1, weight_decay=0.1)
    fused.step(grad_norm=grad_norm(a), max_norm=1.0)
    clip_grad_norm(b, 1.0)
    two_pass = AdamW(b, lr=0.1, weight_decay=0.1)
    for p, st_i in zip(b, range(len(b)), strict=True):  # the separate pass, tensor by tensor
        st = two_pass.state[st_i] = {"m": ops.full_like(p.value, 0.0),
                                     "v": ops.full_like(p.value, 0.0), "step": 1}  # fmt: skip
        assert p.grad is not None
        ops.adam_update(p.value, p.grad, st["m"], st["v"], 0.1, 0.9, 0.999, 1e-8, 0.1, 1)
    for p, q in zip(a, b, strict=True):
        assert p.value.numpy().tobytes() == q.value.numpy().tobytes()


def test_trainer_steps_all_parameters_in_one_call_per_optimizer(monkeypatch: Any) -> None:
    from riftco.nn import GPT, GPTConfig
    from riftco.train.data import CharDataset
    from riftco.train.loop import TrainConfig, Trainer

    data = CharDataset.from_text("to be or not to be, that is the question. " * 40, 16, "t")
    calls: list[tuple[int, bool]] = []
    real = ops.adam_update_multi

    def spy(params: Any, *args: Any, **kwargs: Any) -> None:
        calls.append((len(params), args[10] is not None))  # grad_norm given: clipped inside
        real(params, *args, **kwargs)

    monkeypatch.setattr("riftco.optim.ops.adam_update_multi", spy)
    monkeypatch.setattr("riftco.ops.adam_update", lambda *a, **k: pytest.fail("per tensor"))
    cfg = GPTConfig(vocab=data.tokenizer.vocab_size, context=16, layers=1, heads=2, width=16)
    model = GPT(cfg, device="cpu", seed=0)
    trainer = Trainer(model, data, TrainConfig(steps=2, batch_size=4))
    trainer.train_step()
    n = len(list(model.parameters()))
    assert sorted(c[0] for c in calls) == sorted([len(trainer.optimizers[0].params),
                                                  len(trainer.optimizers[1].params)])  # fmt: skip
    assert sum(c[0] for c in calls) == n and all(c[1] for c in calls)


@pytest.mark.parametrize("minor", [0, 1])
def test_protocol_1_0_and_1_1_backends_stay_valid_and_run_the_composite(minor: int) -> None:
    from riftco.backends.cpu.backend import CPUBackend
    from riftco.plugin_checks import protocol_problem, protocol_version_of

    body = {"name": f"old{minor}", "protocol_version": (1, minor), "adam_update_multi": None}
    old = type(f"Old{minor}", (CPUBackend,), body)
    assert protocol_version_of(old) == ((1, minor), "") and protocol_problem(old) == ""
    be = old()
    assert not ops.is_native(be, "adam_update_multi")
    rng = np.random.default_rng(2)
    p0, g0 = rng.standard_normal((2, 6))
    p, g, m, v = (be.from_numpy(a) for a in (p0, g0, np.zeros(6), np.zeros(6)))
    norm = be.from_numpy(np.array(4.0))
    ops.adam_update_multi([p], [g], [m], [v], step=1, grad_norm=norm, max_norm=2.0, **HYPER)
    want = _reference(p0, g0, np.zeros(6), np.zeros(6), 1, 2.0 / (4.0 + 1e-6), **HYPER)
    for t, w in zip((p, m, v), want, strict=True):
        np.testing.assert_allclose(t.numpy(), w, rtol=1e-13, atol=1e-15)
