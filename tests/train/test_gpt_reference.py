"""The GPT's loss and every gradient against an independent float64 numpy model.

The reference below is written from the equations (no riftco code): embeddings, pre-LN
blocks with causal multi-head attention and a tanh-GELU MLP, final LayerNorm, untied head,
mean cross-entropy ignoring targets of -1, and a hand-derived backward pass. It is itself
checked against centred finite differences, so a wrong reference cannot hide a wrong model.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

riftco = pytest.importorskip("riftco")
pytest.importorskip("riftco.autograd", reason="autograd not built yet")

from riftco.nn import GPT, GPTConfig  # noqa: E402

GELU_C = math.sqrt(2.0 / math.pi)


# -- the reference model -------------------------------------------------------------------------
def _ln(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
    xh = (x - mu) * rstd
    return xh * g + b, (xh, rstd, g)


def _ln_back(dy, cache):
    xh, rstd, g = cache
    lead = tuple(range(dy.ndim - 1))
    dxh = dy * g
    dx = rstd * (dxh - dxh.mean(-1, keepdims=True) - xh * (dxh * xh).mean(-1, keepdims=True))
    return dx, (dy * xh).sum(lead), dy.sum(lead)


def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + 0.044715 * x**3)))


def _gelu_back(dy, x):
    t = np.tanh(GELU_C * (x + 0.044715 * x**3))
    return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_C * (1 + 3 * 0.044715 * x * x))


def reference(p: dict, idx: np.ndarray, targets: np.ndarray, layers: int, heads: int):
    """Loss and gradients of every parameter, in float64."""
    B, T = idx.shape
    C = p["wte.weight"].shape[1]
    hs = C // heads
    scale = 1.0 / math.sqrt(hs)
    mask = np.triu(np.ones((T, T), dtype=bool), k=1)
    x = p["wte.weight"][idx] + p["wpe.weight"][:T][None]  # (B, T, C)
    caches = []
    for i in range(layers):
        w = {k[len(f"blocks.{i}.") :]: v for k, v in p.items() if k.startswith(f"blocks.{i}.")}
        h1, c1 = _ln(x, w["ln1.weight"], w["ln1.bias"])
        qkv = h1 @ w["attn.qkv.weight"] + w["attn.qkv.bias"]  # (B, T, 3C)
        q, k, v = (
            qkv[..., j * C : (j + 1) * C].reshape(B, T, heads, hs).transpose(0, 2, 1, 3)
            for j in range(3)
        )
        s = q @ k.transpose(0, 1, 3, 2) * scale  # (B, nh, T, T)
        s = np.where(mask, -np.inf, s)
        pr = np.exp(s - s.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        o = (pr @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x2 = x + o @ w["attn.proj.weight"] + w["attn.proj.bias"]
        h2, c2 = _ln(x2, w["ln2.weight"], w["ln2.bias"])
        a = h2 @ w["mlp.fc.weight"] + w["mlp.fc.bias"]
        g = _gelu(a)
        x3 = x2 + g @ w["mlp.proj.weight"] + w["mlp.proj.bias"]
        caches.append((w, h1, c1, q, k, v, pr, o, h2, c2, a, g))
        x = x3
    hf, cf = _ln(x, p["ln_f.weight"], p["ln_f.bias"])
    logits = hf.reshape(B * T, C) @ p["head.weight"]  # (B*T, V)
    t = targets.reshape(-1)
    valid = t != -1
    m = logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits - m).sum(-1)) + m[:, 0]
    picked = logits[np.arange(B * T), np.where(valid, t, 0)]
    loss = ((lse - picked) * valid).sum() / valid.sum()

    grads = {k: np.zeros_like(v) for k, v in p.items()}
    dlogits = np.exp(logits - lse[:, None])
    dlogits[np.arange(B * T), np.where(valid, t, 0)] -= 1.0
    dlogits *= valid[:, None] / valid.sum()
    grads["head.weight"] = hf.reshape(B * T, C).T @ dlogits
    dhf = (dlogits @ p["head.weight"].T).reshape(B, T, C)
    dx, grads["ln_f.weight"], grads["ln_f.bias"] = _ln_back(dhf, cf)
    for i in reversed(range(layers)):
        w, h1, c1, q, k, v, pr, o, h2, c2, a, g = caches[i]
        pre = f"blocks.{i}."
        grads[pre + "mlp.proj.weight"] = g.reshape(-1, g.shape[-1]).T @ dx.reshape(-1, C)
        grads[pre + "mlp.proj.bias"] = dx.sum((0, 1))
        da = _gelu_back(dx @ w["mlp.proj.weight"].T, a)
        grads[pre + "mlp.fc.weight"] = h2.reshape(-1, C).T @ da.reshape(-1, da.shape[-1])
        grads[pre + "mlp.fc.bias"] = da.sum((0, 1))
        dln2, grads[pre + "ln2.weight"], grads[pre + "ln2.bias"] = _ln_back(
            da @ w["mlp.fc.weight"].T, c2
        )
        dx2 = dx + dln2
        grads[pre + "attn.proj.weight"] = o.reshape(-1, C).T @ dx2.reshape(-1, C)
        grads[pre + "attn.proj.bias"] = dx2.sum((0, 1))
        do = (dx2 @ w["attn.proj.weight"].T).reshape(B, T, heads, hs).transpose(0, 2, 1, 3)
        dv = pr.transpose(0, 1, 3, 2) @ do
        dp = do @ v.transpose(0, 1, 3, 2)
        ds = pr * (dp - (dp * pr).sum(-1, keepdims=True))
        dq = ds @ k * scale
        dk = ds.transpose(0, 1, 3, 2) @ q * scale
        dqkv = np.concatenate(
            [d.transpose(0, 2, 1, 3).reshape(B, T, C) for d in (dq, dk, dv)], axis=-1
        )
        grads[pre + "attn.qkv.weight"] = h1.reshape(-1, C).T @ dqkv.reshape(-1, 3 * C)
        grads[pre + "attn.qkv.bias"] = dqkv.sum((0, 1))
        dln1, grads[pre + "ln1.weight"], grads[pre + "ln1.bias"] = _ln_back(
            dqkv @ w["attn.qkv.weight"].T, c1
        )
        dx = dx2 + dln1
    np.add.at(grads["wte.weight"], idx.reshape(-1), dx.reshape(-1, C))
    grads["wpe.weight"][:T] = dx.sum(0)
    return loss, grads


def _random_params(rng, vocab, context, layers, width):
    shapes = {
        "wte.weight": (vocab, width),
        "wpe.weight": (context, width),
        "ln_f.weight": (width,),
        "ln_f.bias": (width,),
        "head.weight": (width, vocab),
    }
    for i in range(layers):
        C = width
        for name, shape in {
            "ln1.weight": (C,),
            "ln1.bias": (C,),
            "ln2.weight": (C,),
            "ln2.bias": (C,),
            "attn.qkv.weight": (C, 3 * C),
            "attn.qkv.bias": (3 * C,),
            "attn.proj.weight": (C, C),
            "attn.proj.bias": (C,),
            "mlp.fc.weight": (C, 4 * C),
            "mlp.fc.bias": (4 * C,),
            "mlp.proj.weight": (4 * C, C),
            "mlp.proj.bias": (C,),
        }.items():
            shapes[f"blocks.{i}.{name}"] = shape
    return {
        k: rng.normal(0.0, 0.5, s) + (1.0 if k.endswith("ln1.weight") else 0.0)
        for k, s in shapes.items()
    }


def test_reference_matches_finite_differences():
    rng = np.random.default_rng(3)
    p = _random_params(rng, vocab=7, context=5, layers=2, width=8)
    idx = rng.integers(0, 7, (2, 4))
    tgt = rng.integers(0, 7, (2, 4))
    tgt[0, 1] = -1
    _, grads = reference(p, idx, tgt, layers=2, heads=2)
    h = 1e-6
    for name, value in p.items():
        flat = value.reshape(-1)
        for j in rng.choice(flat.size, size=min(3, flat.size), replace=False):
            old = flat[j]
            flat[j] = old + h
            up = reference(p, idx, tgt, 2, 2)[0]
            flat[j] = old - h
            down = reference(p, idx, tgt, 2, 2)[0]
            flat[j] = old
            fd = (up - down) / (2 * h)
            assert abs(fd - grads[name].reshape(-1)[j]) < 1e-6 * max(1.0, abs(fd)), name


# -- the riftco model against it -------------------------------------------------------------------
@pytest.mark.parametrize(
    "attention,recompute",
    [("materialized", "none"), ("flash", "none"), ("materialized", "block"), ("flash", "block")],
)
def test_gpt_forward_backward_matches_reference(attention, recompute):
    cfg = GPTConfig(
        vocab=11,
        context=8,
        layers=2,
        heads=2,
        width=16,
        attention=attention,
        recompute=recompute,
    )
    model = GPT(cfg, device="cpu", dtype=np.float64, seed=0)
    rng = np.random.default_rng(1)
    # Perturb the init so LayerNorm gains and biases are not trivially 1 and 0.
    params = {k: v + rng.normal(0.0, 0.1, v.shape) for k, v in model.state_dict().items()}
    model.load_state_dict(params)
    idx = rng.integers(0, 11, (3, 7)).astype(np.int32)  # T=7 < context: positions are cropped
    tgt = rng.integers(0, 11, (3, 7)).astype(np.int32)
    tgt[1, 2] = -1
    loss = model.loss(riftco.tensor(idx, device="cpu"), riftco.tensor(tgt, device="cpu"))
    loss.backward()
    ref_loss, ref_grads = reference(params, idx, tgt, cfg.layers, cfg.heads)
    np.testing.assert_allclose(loss.value.item(), ref_loss, rtol=1e-10)
    named = dict(model.named_parameters())
    assert set(named) == set(ref_grads)
    for name, param in named.items():
        got = param.grad.numpy()
        err = np.abs(got - ref_grads[name])
        worst = np.unravel_index(err.argmax(), err.shape)
        assert err.max() <= 1e-9 + 1e-7 * np.abs(ref_grads[name]).max(), (
            f"{name}: max abs error {err.max():.3e} at {worst}"
        )
