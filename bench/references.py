"""The same GPT in PyTorch eager and tinygrad, for ratios in bench/train_step.py.

Both are optional: nothing here is imported unless the package is installed, and neither is
a dependency of riftco. Each reference takes riftco's own initial weights (a name -> numpy
dict from ``GPT.state_dict()``), so all contenders run the very same model: weights stored
``(in, out)`` and used as ``x @ W``, pre-LN blocks, GELU tanh, untied head, float32, AdamW.
The first loss of every contender is recorded so a mismatch would show in the JSON.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import numpy as np

Step = Callable[[], float]


def installed_version(module: str, distribution: str) -> str | None:
    """``distribution``'s version where ``module`` imports, else None: a reference runs only
    where its package is installed and loads (mac_check and train_step record the version)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return None
    return version(distribution)


def _block_names(layers: int) -> list[str]:
    return [f"blocks.{i}." for i in range(layers)]


# -- PyTorch eager ---------------------------------------------------------------------------
def torch_version() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return str(torch.__version__)


def torch_step(
    weights: dict[str, np.ndarray],
    cfg: Any,
    batches: list[tuple[np.ndarray, np.ndarray]],
    lr: float,
    weight_decay: float,
    threads: int,
    device: str = "cpu",
) -> Step:
    """One training step of the GPT in PyTorch eager on ``device`` ("cpu"; "mps" on a Mac)."""
    import torch
    import torch.nn.functional as F  # noqa: N812 - PyTorch spelling

    torch.set_num_threads(threads)
    params = {k: torch.tensor(v, requires_grad=True, device=device) for k, v in weights.items()}
    C, nh = cfg.width, cfg.heads  # noqa: N806
    hs = C // nh

    def ln(x: Any, p: str) -> Any:
        return F.layer_norm(x, (C,), params[p + "weight"], params[p + "bias"], 1e-5)

    def lin(x: Any, p: str) -> Any:
        y = x @ params[p + "weight"]
        b = params.get(p + "bias")
        return y if b is None else y + b

    def forward(idx: Any, tgt: Any) -> Any:
        B, T = idx.shape  # noqa: N806
        x = params["wte.weight"][idx] + params["wpe.weight"][:T]  # (B, T, C)
        for p in _block_names(cfg.layers):
            q, k, v = lin(ln(x, p + "ln1."), p + "attn.qkv.").split(C, dim=-1)
            q, k, v = (t.view(B, T, nh, hs).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + lin(y.transpose(1, 2).reshape(B, T, C), p + "attn.proj.")
            h = F.gelu(lin(ln(x, p + "ln2."), p + "mlp.fc."), approximate="tanh")
            x = x + lin(h, p + "mlp.proj.")
        logits = lin(ln(x, "ln_f."), "head.")
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1))

    opt = torch.optim.AdamW(list(params.values()), lr=lr, weight_decay=weight_decay)
    data = [(torch.from_numpy(x.astype(np.int64)).to(device),
             torch.from_numpy(y.astype(np.int64)).to(device)) for x, y in batches]  # fmt: skip
    state = {"i": 0}

    def step() -> float:
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        opt.zero_grad(set_to_none=True)
        loss = forward(x, y)
        loss.backward()
        opt.step()
        return float(loss.item())

    return step


# -- tinygrad -------------------------------------------------------------------------------------
def tinygrad_version() -> str | None:
    return installed_version("tinygrad", "tinygrad")


def tinygrad_step(
    weights: dict[str, np.ndarray],
    cfg: Any,
    batches: list[tuple[np.ndarray, np.ndarray]],
    lr: float,
    weight_decay: float,
    device: str,
) -> Step:
    """One TinyJit-captured training step of the GPT in tinygrad on ``device`` (CPU, CL)."""
    from tinygrad import Context, Tensor, TinyJit
    from tinygrad.nn.optim import AdamW

    if not gelu_is_tanh():
        raise RuntimeError("tinygrad's gelu is not the tanh form: not a like-for-like model")
    params = {k: Tensor(v, device=device).realize() for k, v in weights.items()}
    C, nh = cfg.width, cfg.heads  # noqa: N806
    hs = C // nh

    def lin(x: Any, p: str) -> Any:
        y = x @ params[p + "weight"]
        b = params.get(p + "bias")
        return y if b is None else y + b

    def ln(x: Any, p: str) -> Any:
        return x.layernorm(eps=1e-5) * params[p + "weight"] + params[p + "bias"]

    def forward(idx: Any, tgt: Any) -> Any:
        B, T = idx.shape  # noqa: N806
        x = params["wte.weight"][idx] + params["wpe.weight"][:T]
        for p in _block_names(cfg.layers):
            qkv = lin(ln(x, p + "ln1."), p + "attn.qkv.")
            q, k, v = (qkv[:, :, i * C : (i + 1) * C] for i in range(3))
            q, k, v = (t.reshape(B, T, nh, hs).transpose(1, 2) for t in (q, k, v))
            y = q.scaled_dot_product_attention(k, v, is_causal=True)
            x = x + lin(y.transpose(1, 2).reshape(B, T, C), p + "attn.proj.")
            x = x + lin(lin(ln(x, p + "ln2."), p + "mlp.fc.").gelu(), p + "mlp.proj.")
        logits = lin(ln(x, "ln_f."), "head.")
        return logits.reshape(-1, logits.shape[-1]).sparse_categorical_crossentropy(tgt.reshape(-1))

    opt = AdamW(list(params.values()), lr=lr, weight_decay=weight_decay)

    @TinyJit
    def jit_step(x: Any, y: Any) -> Any:
        with Context(TRAINING=1):  # tinygrad 0.14: tensors are params by default
            opt.zero_grad()
            loss = forward(x, y)
            loss.backward()
            # the loss is realised in the same schedule as the update, so it is the loss
            # of the weights before this step (as in the other contenders)
            Tensor.realize(loss, *opt.schedule_step())
        return loss

    data = [(Tensor(x.astype(np.int32), device=device).realize(),
             Tensor(y.astype(np.int32), device=device).realize()) for x, y in batches]  # fmt: skip
    state = {"i": 0}

    def step() -> float:
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        return float(jit_step(x, y).item())

    return step


def gelu_is_tanh() -> bool:
    """tinygrad's ``Tensor.gelu`` is the tanh form (checked here, not assumed)."""
    from tinygrad import Tensor

    x = np.linspace(-3, 3, 7, dtype=np.float32)
    want = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return bool(np.allclose(Tensor(x).gelu().numpy(), want, atol=1e-5))
