"""LayerNorm's launch plan (op unit ``riftco.ops.fused.layer_norm``; ``shaders/layernorm.cl``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .fused_plan import flat_threads, prod, row_plan
from .host import KernelMixin

if TYPE_CHECKING:
    from ..tensor import Tensor
    from .host import KernelHost

#: Rows per chunk in the first stage of LayerNorm's dgamma/dbeta reduction.
_LN_CHUNK_ROWS = 64


class LayerNormKernels(KernelMixin):
    """LayerNorm over the last axis: one row launch forward; backward a row launch for dx
    and a two-stage column reduction (no atomics) for dgamma and dbeta."""

    def layer_norm(
        self, x: Tensor, gamma: Tensor, beta: Tensor, eps: float
    ) -> tuple[Tensor, Tensor, Tensor]:
        c = x.shape[-1]
        lead = tuple(x.shape[:-1])
        rows = prod(lead)
        y = self.empty(x.shape, x.dtype)
        mean = self.empty(lead, x.dtype)
        rstd = self.empty(lead, x.dtype)
        if rows and not c:  # core rejects C = 0; called directly, the statistics are NaN
            self.fill(mean, math.nan)
            self.fill(rstd, math.nan)
        if x.size:
            threads, width = row_plan(rows, c)
            self.launch(
                "layernorm", "layer_norm_forward", x.dtype, threads,
                y, mean, rstd, x, gamma, beta, ints=(rows, c, width), floats=(eps,),
            )  # fmt: skip
        return y, mean, rstd

    def layer_norm_backward(
        self, dy: Tensor, x: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        c = x.shape[-1]
        rows = prod(x.shape[:-1])
        dt = x.dtype
        dx = self.empty(x.shape, dt)
        dgamma = self.empty((c,), dt)
        dbeta = self.empty((c,), dt)
        if c == 0:
            return dx, dgamma, dbeta
        if rows == 0:
            self.fill(dgamma, 0.0)
            self.fill(dbeta, 0.0)
            return dx, dgamma, dbeta
        threads, width = row_plan(rows, c)
        self.launch(
            "layernorm", "layer_norm_backward_dx", dt, threads,
            dx, dy, x, gamma, mean, rstd, ints=(rows, c, width),
        )  # fmt: skip
        launch_param_sums(self, dgamma, dbeta, dy, x, mean, rstd)
        return dx, dgamma, dbeta


def launch_param_sums(
    host: KernelHost, dgamma: Tensor, dbeta: Tensor, dy: Tensor, x: Tensor, mean: Tensor,
    rstd: Tensor,
) -> None:  # fmt: skip
    """dgamma/dbeta without atomics (rows >= 1): per-chunk column sums, then a sum over
    chunks. Shared with ``add_layer_norm_backward`` (``x`` is its ``s``)."""
    c, rows, dt = x.shape[-1], prod(x.shape[:-1]), x.dtype
    chunks = -(-rows // _LN_CHUNK_ROWS)
    partial = host.empty((chunks, 2, c), dt)
    pints = (rows, c, _LN_CHUNK_ROWS, chunks)
    host.launch(
        "layernorm", "layer_norm_backward_partial", dt, flat_threads(chunks * c),
        partial, dy, x, mean, rstd, ints=pints,
    )  # fmt: skip
    host.launch(
        "layernorm", "layer_norm_backward_params", dt, flat_threads(c),
        dgamma, dbeta, partial, ints=pints,
    )  # fmt: skip
