"""LayerNorm's launch plan (op unit ``riftco.ops.fused.layer_norm``; ``shaders/layer_norm.cl``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..dtypes import compute_dtype
from .fused_plan import flat_threads, prod, row_plan
from .host import PlanBase

if TYPE_CHECKING:
    from ..tensor import Tensor
    from .host import KernelHost

#: Rows per chunk in the first stage of LayerNorm's dgamma/dbeta reduction.
_LN_CHUNK_ROWS = 64


class LayerNormPlan(PlanBase):
    """LayerNorm over the last axis: one row launch forward; backward a row launch for dx
    and a two-stage column reduction (no atomics) for dgamma and dbeta."""

    def layer_norm(
        self, x: Tensor, gamma: Tensor, beta: Tensor, eps: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        y, mean, rstd, rows, c = forward_outputs(self, x)
        if x.size:
            threads, width = row_plan(rows, c)
            self.launch(
                "layer_norm", "layer_norm_forward", x.dtype, threads,
                y, mean, rstd, x, gamma, beta, ints=(rows, c, width), floats=(eps,),
            )  # fmt: skip
        return y, mean, rstd

    def layer_norm_backward(
        self, dy: Tensor, x: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        return backward(self, "layer_norm_backward_dx", (dy, x, gamma, mean, rstd))


def forward_outputs(host: KernelHost, x: Tensor) -> tuple[Tensor, Tensor, Tensor, int, int]:
    """``(y, mean, rstd, rows, C)`` for a LayerNorm of ``x`` (shared with add_layer_norm):
    a row of zero columns, which core rejects, gets NaN statistics when called directly."""
    c = x.shape[-1]
    lead = tuple(x.shape[:-1])
    rows = prod(lead)
    y = host.empty(x.shape, x.dtype)
    mean = host.empty(lead, compute_dtype(x.dtype))  # float32 for half x (the op unit's)
    rstd = host.empty(lead, compute_dtype(x.dtype))
    if rows and not c:
        host.fill(mean, math.nan)
        host.fill(rstd, math.nan)
    return y, mean, rstd, rows, c


def backward_outputs(host: KernelHost, x: Tensor) -> tuple[Tensor, Tensor, Tensor, int, int]:
    """``(dx, dgamma, dbeta, rows, C)`` for a LayerNorm backward over ``x``'s shape (shared
    with add_layer_norm): with no rows the parameter sums are already the zeros they are;
    the caller launches only when ``rows and C``."""
    c = x.shape[-1]
    rows = prod(x.shape[:-1])
    dx = host.empty(x.shape, x.dtype)
    dgamma = host.empty((c,), x.dtype)
    dbeta = host.empty((c,), x.dtype)
    if c and not rows:
        host.fill(dgamma, 0.0)
        host.fill(dbeta, 0.0)
    return dx, dgamma, dbeta, rows, c


def backward(
    host: KernelHost, kernel: str, inputs: tuple[Tensor, ...]
) -> tuple[Tensor, Tensor, Tensor]:
    """A LayerNorm backward (shared with add_layer_norm's): ``(dx, dgamma, dbeta)``, dx
    (add_layer_norm: ``ds + dx``) from one row launch of ``kernel`` over ``inputs``, which
    end with ``gamma, mean, rstd`` after the normalised tensor, then the parameter sums."""
    dy, x, mean, rstd = inputs[0], inputs[-4], inputs[-2], inputs[-1]
    dx, dgamma, dbeta, rows, c = backward_outputs(host, x)
    if rows and c:
        threads, width = row_plan(rows, c)
        host.launch("layer_norm", kernel, x.dtype, threads, dx, *inputs, ints=(rows, c, width))
        launch_param_sums(host, dgamma, dbeta, dy, x, mean, rstd)
    return dx, dgamma, dbeta


def launch_param_sums(
    host: KernelHost, dgamma: Tensor, dbeta: Tensor, dy: Tensor, x: Tensor, mean: Tensor,
    rstd: Tensor,
) -> None:  # fmt: skip
    """dgamma/dbeta without atomics (rows >= 1): per-chunk column sums, then a sum over
    chunks. Shared with ``add_layer_norm_backward`` (``x`` is its ``s``)."""
    c, rows, dt = x.shape[-1], prod(x.shape[:-1]), x.dtype
    chunks = -(-rows // _LN_CHUNK_ROWS)
    partial = host.empty((chunks, 2, c), compute_dtype(dt))  # the kernels' T
    pints = (rows, c, _LN_CHUNK_ROWS, chunks)
    host.launch(
        "layer_norm", "layer_norm_backward_partial", dt, flat_threads(chunks * c),
        partial, dy, x, mean, rstd, ints=pints,
    )  # fmt: skip
    host.launch(
        "layer_norm", "layer_norm_backward_params", dt, flat_threads(c),
        dgamma, dbeta, partial, ints=pints,
    )  # fmt: skip
