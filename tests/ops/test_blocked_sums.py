"""Long sums keep their accuracy (issue 12): a float32 sum over 10^6 rows is within a few
float32 ulps of the float64 math, where adding row after row drifts to ~1e-5 relative.

The reference is float64 ``math.fsum`` (correctly rounded) of the very float32 inputs;
the inputs have mean 1, so the partial sums grow to 10^6 and a sequential sum loses about
n * 2^-24 of them. The bound 3e-7 is five float32 unit roundoffs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import riftco
from riftco import ops

ROWS = 1_000_000
REL_F32 = 3e-7


def _backends() -> list[str]:
    names = ["cpu"]
    entry = riftco.get_registry().entries.get("native")
    if entry is not None and entry.available:
        names.append("native")
    return names


BACKENDS = _backends()


@pytest.fixture(scope="module")
def rows_f32() -> np.ndarray:
    rng = np.random.default_rng(12)
    return (rng.standard_normal((ROWS, 3)) + 1.0).astype(np.float32)


def _fsum_columns(x: np.ndarray) -> np.ndarray:
    return np.array([math.fsum(x[:, j].astype(np.float64)) for j in range(x.shape[1])])


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got.astype(np.float64) - want) / np.abs(want)))


def test_sequential_float32_sum_is_what_we_guard_against(rows_f32: np.ndarray) -> None:
    """The bound can fail: numpy's row-by-row reduction along axis 0 misses it by far."""
    sequential = np.add.reduce(rows_f32, axis=0)
    assert _rel(sequential, _fsum_columns(rows_f32)) > 10 * REL_F32


@pytest.mark.parametrize("backend", BACKENDS)
def test_sum_over_a_million_rows_float32(backend: str, rows_f32: np.ndarray) -> None:
    got = ops.sum(riftco.tensor(rows_f32, device=backend), 0)
    assert got.dtype == np.float32 and got.shape == (3,)
    assert _rel(got.numpy(), _fsum_columns(rows_f32)) < REL_F32


@pytest.mark.parametrize("backend", BACKENDS)
def test_bias_gradient_sum_to_shape(backend: str, rows_f32: np.ndarray) -> None:
    """The bias gradient of a linear layer over B*T = 10^6 rows (keepdims, then reshape)."""
    x = riftco.tensor(rows_f32.reshape(1000, 1000, 3), device=backend)
    got = ops.sum_to_shape(x, (3,))
    assert got.dtype == np.float32
    assert _rel(got.numpy(), _fsum_columns(rows_f32)) < REL_F32


@pytest.mark.parametrize("backend", BACKENDS)
def test_keepdims_and_two_leading_axes(backend: str, rows_f32: np.ndarray) -> None:
    x = riftco.tensor(rows_f32.reshape(1000, 1000, 3), device=backend)
    got = ops.sum(x, (0, 1), keepdims=True)
    assert got.shape == (1, 1, 3)
    assert _rel(got.numpy().reshape(3), _fsum_columns(rows_f32)) < REL_F32


@pytest.mark.parametrize("backend", BACKENDS)
def test_full_sum_float32(backend: str, rows_f32: np.ndarray) -> None:
    got = ops.sum(riftco.tensor(rows_f32, device=backend))
    want = math.fsum(rows_f32.astype(np.float64).reshape(-1))
    assert got.shape == () and abs(float(got.numpy()) - want) / abs(want) < REL_F32


@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_norm_backward_dbeta_dgamma_over_a_million_rows(
    backend: str, rows_f32: np.ndarray
) -> None:
    """dbeta is the sum of dy over rows, dgamma the sum of dy * xhat: both long sums."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((ROWS, 3)).astype(np.float32)
    gamma, beta = np.ones(3, np.float32), np.zeros(3, np.float32)

    def dev(a: np.ndarray) -> riftco.Tensor:
        return riftco.tensor(a, device=backend)

    _, mean, rstd = ops.layer_norm(dev(x), dev(gamma), dev(beta), 1e-5)
    _, dgamma, dbeta = ops.layer_norm_backward(dev(rows_f32), dev(x), dev(gamma), mean, rstd)
    assert _rel(dbeta.numpy(), _fsum_columns(rows_f32)) < REL_F32
    xhat = (x.astype(np.float64) - mean.numpy()[:, None]) * rstd.numpy()[:, None]
    want_dgamma = _fsum_columns(rows_f32.astype(np.float64) * xhat)
    # xhat itself carries float32 rounding per element (random sign): a few ulps of |dgamma|
    scale = _fsum_columns(np.abs(rows_f32.astype(np.float64) * xhat))
    err = np.abs(dgamma.numpy().astype(np.float64) - want_dgamma) / scale
    assert float(np.max(err)) < REL_F32


@pytest.mark.parametrize("backend", BACKENDS)
def test_float64_sum_matches_fsum(backend: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((200_000, 2)) + 1.0
    got = ops.sum(riftco.tensor(x, device=backend), 0).numpy()
    assert got.dtype == np.float64
    assert _rel(got, _fsum_columns(x)) < 1e-14


@pytest.mark.parametrize("backend", BACKENDS)
def test_sums_propagate_nan_and_inf(backend: str) -> None:
    x = np.ones((300, 4), np.float32)
    x[7, 0], x[8, 1], x[9, 2], x[10, 2] = np.nan, np.inf, np.inf, -np.inf
    got = ops.sum(riftco.tensor(x, device=backend), 0).numpy()
    assert np.isnan(got[0]) and got[1] == np.inf and np.isnan(got[2]) and got[3] == 300.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_sum_over_middle_and_empty_axes(backend: str) -> None:
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    got = ops.sum(riftco.tensor(x, device=backend), 1).numpy()
    np.testing.assert_allclose(got, x.astype(np.float64).sum(1), rtol=1e-6, atol=1e-6)
    empty = ops.sum(riftco.tensor(np.zeros((0, 3), np.float32), device=backend), 0)
    assert empty.shape == (3,) and not np.any(empty.numpy())


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_backward_of_a_frequent_id(backend: str, rows_f32: np.ndarray) -> None:
    """Half a million rows land on each of two ids: a long per-id sum."""
    from riftco import ops as fused_ops

    ids = np.zeros(ROWS, np.int32)
    ids[::2] = 1
    got = fused_ops.embedding_backward(
        riftco.tensor(rows_f32, device=backend), riftco.tensor(ids, device=backend), 3
    )
    assert got.dtype == np.float32 and got.shape == (3, 3)
    g = got.numpy()
    for i in range(2):
        assert _rel(g[i], _fsum_columns(rows_f32[ids == i])) < REL_F32
    assert not np.any(g[2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_backward_keeps_ieee_specials(backend: str) -> None:
    from riftco import ops as fused_ops

    dy = np.ones((6, 3), np.float32)
    dy[1, 0], dy[2, 1], dy[3, 2], dy[4, 2] = np.inf, np.nan, np.inf, -np.inf
    ids = riftco.tensor(np.zeros(6, np.int32), device=backend)
    g = fused_ops.embedding_backward(riftco.tensor(dy, device=backend), ids, 1).numpy()
    assert g[0, 0] == np.inf and np.isnan(g[0, 1]) and np.isnan(g[0, 2])
