"""The GPT of bench/references.py in MLX, for ms/step ratios on Apple silicon (mac_check).

Optional like the other references: imported only when MLX is installed, never a
dependency. It takes riftco's own initial weights (``GPT.state_dict()``: weights stored
``(in, out)``, used as ``x @ W``), so it is the same model: pre-LN blocks, GELU in the tanh
form written out (not one of MLX's own approximations), causal SDPA, untied head, float32,
AdamW over every parameter. MLX runs on the GPU by default on a Mac and on the CPU
elsewhere (``pip install "mlx[cpu]"`` on Linux), which is how the tests exercise it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from references import installed_version

Step = Any  # Callable[[], float]; kept loose so this module imports without MLX


def mlx_version() -> str | None:
    return installed_version("mlx.core", "mlx")


def mlx_step(
    weights: dict[str, np.ndarray],
    cfg: Any,
    batches: list[tuple[np.ndarray, np.ndarray]],
    lr: float,
    weight_decay: float,
    device: str = "gpu",
) -> Step:
    """One training step of the GPT in MLX on ``device`` ("gpu" or "cpu")."""
    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim

    mx.set_default_device(mx.gpu if device == "gpu" else mx.cpu)
    state: dict[str, Any] = {"params": {k: mx.array(v) for k, v in weights.items()}, "i": 0}
    C, nh = cfg.width, cfg.heads  # noqa: N806
    hs = C // nh
    blocks = [f"blocks.{i}." for i in range(cfg.layers)]
    k_gelu = math.sqrt(2.0 / math.pi)

    def forward(params: dict[str, Any], idx: Any, tgt: Any) -> Any:
        def lin(x: Any, p: str) -> Any:
            y = x @ params[p + "weight"]
            b = params.get(p + "bias")
            return y if b is None else y + b

        def ln(x: Any, p: str) -> Any:
            return mx.fast.layer_norm(x, params[p + "weight"], params[p + "bias"], 1e-5)

        B, T = idx.shape  # noqa: N806
        x = params["wte.weight"][idx] + params["wpe.weight"][:T]
        for p in blocks:
            q, k, v = mx.split(lin(ln(x, p + "ln1."), p + "attn.qkv."), 3, axis=-1)
            q, k, v = (t.reshape(B, T, nh, hs).transpose(0, 2, 1, 3) for t in (q, k, v))
            y = mx.fast.scaled_dot_product_attention(q, k, v, scale=hs**-0.5, mask="causal")
            x = x + lin(y.transpose(0, 2, 1, 3).reshape(B, T, C), p + "attn.proj.")
            h = lin(ln(x, p + "ln2."), p + "mlp.fc.")
            h = 0.5 * h * (1.0 + mx.tanh(k_gelu * (h + 0.044715 * h * h * h)))
            x = x + lin(h, p + "mlp.proj.")
        logits = lin(ln(x, "ln_f."), "head.")
        return nn.losses.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="mean"
        )

    loss_and_grad = mx.value_and_grad(forward)
    # bias_correction: MLX leaves it off by default; riftco, PyTorch and tinygrad apply it
    opt = optim.AdamW(learning_rate=lr, weight_decay=weight_decay, bias_correction=True)
    data = [(mx.array(x.astype(np.int32)), mx.array(y.astype(np.int32))) for x, y in batches]

    def step() -> float:
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        loss, grads = loss_and_grad(state["params"], x, y)
        state["params"] = opt.apply_gradients(grads, state["params"])
        mx.eval(loss, state["params"], opt.state)  # the sync point, like loss.item() elsewhere
        return float(loss.item())

    return step
