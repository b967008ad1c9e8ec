"""Module bookkeeping: names, counts, initialisation, state dicts and their errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

riftco = pytest.importorskip("riftco")
pytest.importorskip("riftco.autograd", reason="autograd not built yet")

from riftco.nn import GPT, GPTConfig  # noqa: E402


def _count(V, ctx, L, C):
    block = 12 * C * C + 13 * C  # ln1, qkv, proj, ln2, fc, proj (weights and biases)
    return V * C + ctx * C + L * block + 2 * C + C * V


def test_parameter_names_and_count():
    cfg = GPTConfig(vocab=13, context=9, layers=3, heads=2, width=8)
    model = GPT(cfg, device="cpu")
    names = [n for n, _ in model.named_parameters()]
    assert names[:2] == ["wte.weight", "wpe.weight"]
    assert names[-3:] == ["ln_f.weight", "ln_f.bias", "head.weight"]
    assert "blocks.2.attn.qkv.weight" in names and "blocks.2.mlp.proj.bias" in names
    assert len(names) == len(set(names)) == 2 + 3 * 12 + 3
    assert model.num_parameters() == _count(13, 9, 3, 8)
    assert all(p.requires_grad for p in model.parameters())


def test_gpt2_initialisation():
    cfg = GPTConfig(vocab=65, context=64, layers=4, heads=4, width=64)
    sd = GPT(cfg, device="cpu", seed=1).state_dict()
    resid = 0.02 / math.sqrt(2 * cfg.layers)
    for name, arr in sd.items():
        assert arr.dtype == np.float32, name
        if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "ln_f.weight":
            assert np.all(arr == 1.0), name
        elif name.endswith(".bias"):
            assert np.all(arr == 0.0), name
        else:
            want = resid if name.endswith("proj.weight") else 0.02
            assert abs(arr.mean()) < 0.1 * want, name
            assert arr.std() == pytest.approx(want, rel=0.06), name
    a = GPT(cfg, device="cpu", seed=1).state_dict()
    b = GPT(cfg, device="cpu", seed=2).state_dict()
    assert all(np.array_equal(a[k], sd[k]) for k in sd)  # same seed, same model
    assert not np.array_equal(a["head.weight"], b["head.weight"])


def test_state_dict_round_trip():
    cfg = GPTConfig(vocab=7, context=4, layers=1, heads=1, width=4)
    src, dst = GPT(cfg, device="cpu", seed=1), GPT(cfg, device="cpu", seed=2)
    dst.load_state_dict(src.state_dict())
    for (n1, p1), (n2, p2) in zip(src.named_parameters(), dst.named_parameters(), strict=True):
        assert n1 == n2
        np.testing.assert_array_equal(p1.value.numpy(), p2.value.numpy())


def test_state_dict_shape_mismatch_names_the_parameter():
    small = GPT(GPTConfig(vocab=7, context=4, layers=1, heads=1, width=4), device="cpu")
    wide = GPT(GPTConfig(vocab=7, context=4, layers=1, heads=1, width=8), device="cpu")
    before = wide.state_dict()
    with pytest.raises(riftco.ShapeError, match=r"'wte.weight' has shape \(7, 4\).*\(7, 8\)"):
        wide.load_state_dict(small.state_dict())
    sd = dict(before)
    sd["blocks.0.mlp.fc.bias"] = np.zeros(31, np.float32)
    with pytest.raises(riftco.ShapeError, match=r"'blocks.0.mlp.fc.bias' has shape \(31,\)"):
        wide.load_state_dict(sd)
    after = wide.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)  # nothing written


def test_state_dict_missing_unexpected_and_dtype():
    model = GPT(GPTConfig(vocab=7, context=4, layers=1, heads=1, width=4), device="cpu")
    sd = model.state_dict()
    extra = dict(sd, **{"blocks.1.ln1.weight": np.ones(4, np.float32)})
    del extra["head.weight"]
    with pytest.raises(
        riftco.ShapeError, match=r"missing \['head.weight'\].*unexpected \['blocks.1"
    ):
        model.load_state_dict(extra)
    sd["ln_f.bias"] = sd["ln_f.bias"].astype(np.float64)
    with pytest.raises(riftco.DTypeError, match="'ln_f.bias' is float64 .* float32"):
        model.load_state_dict(sd)


def test_config_and_context_errors():
    with pytest.raises(riftco.ShapeError, match="width 10 must be divisible by heads 4"):
        GPTConfig(width=10, heads=4)
    with pytest.raises(ValueError, match="attention must be one of"):
        GPTConfig(attention="sparse")
    model = GPT(GPTConfig(vocab=7, context=4, layers=1, heads=1, width=4), device="cpu")
    ids = riftco.tensor(np.zeros((1, 5), np.int32))
    with pytest.raises(riftco.ShapeError, match="length 5; the context is only 4"):
        model(ids)


def test_block_recompute_keeps_fewer_activations():
    from riftco.autograd import graph_stats

    rng = np.random.default_rng(0)
    idx = riftco.tensor(rng.integers(0, 11, (2, 16)).astype(np.int32))
    tgt = riftco.tensor(rng.integers(0, 11, (2, 16)).astype(np.int32))
    kept = {}
    for mode in ("none", "block"):
        cfg = GPTConfig(vocab=11, context=16, layers=3, heads=2, width=16, recompute=mode)
        kept[mode] = graph_stats(GPT(cfg, device="cpu").loss(idx, tgt))["retained_elements"]
    params = GPT(GPTConfig(vocab=11, context=16, layers=3, heads=2, width=16)).num_parameters()
    # Without recompute every block keeps its (B*T, 4C) MLP activations and more.
    assert kept["block"] < kept["none"] - 3 * 2 * 16 * 4 * 16
    assert kept["block"] < 0.5 * kept["none"]
    assert kept["block"] >= params  # the weights themselves are always retained
