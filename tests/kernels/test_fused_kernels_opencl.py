"""Fused kernels through the real OpenCL backend (``riftco.ops`` -> KernelBackend).

``test_fused_kernels.py`` sweeps every kernel on a bare harness; this file checks the
wiring: ops dispatch natively, validation runs first, launches never read back, and the
results hold at the irregular group sizes Metal may pick.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from fused_reference import attention_ref, gelu_ref, softmax_ref
from helpers import assert_close
from riftco import ops as F
from riftco.errors import ShapeError

pytest.importorskip("pyopencl", reason="pyopencl is not installed (test extra)")
rt = pytest.importorskip("riftco.backends.opencl.runtime", reason="OpenCL backend missing")
if rt.enumerate_devices()[1]:
    pytest.skip(f"no usable OpenCL device: {rt.enumerate_devices()[1]}", allow_module_level=True)

from riftco.backends.opencl.backend import OpenCLBackend  # noqa: E402

TOL = {np.dtype(np.float32): (3e-5, 3e-6), np.dtype(np.float64): (1e-11, 1e-12)}


@pytest.fixture(scope="module", params=[96, 352], ids=lambda g: f"group{g}")
def be(request: pytest.FixtureRequest) -> OpenCLBackend:
    return OpenCLBackend(0, group_size=request.param)


def _dtypes(be: OpenCLBackend) -> list[Any]:
    return [d for d in (np.float32, np.float64) if np.dtype(d) in be.dtypes]


def _close(got: Any, ref: np.ndarray, dtype: Any, what: str, scale: float = 1.0) -> None:
    rtol, atol = TOL[np.dtype(dtype)]
    assert_close(got.numpy(), ref, rtol=rtol * scale, atol=atol * scale, msg=what)


def test_every_fused_op_is_native(be: OpenCLBackend) -> None:
    fused = be.capabilities().as_dict()["fused"]
    assert {op for op, how in fused.items() if how != "native"} == set()


def test_ops_queue_without_reading_back(be: OpenCLBackend) -> None:
    """Forward and backward of every fused op (the backend methods) download nothing."""
    rng = np.random.default_rng(0)
    up = be.from_numpy
    x = up(rng.normal(size=(5, 33)).astype(np.float32))
    g = up(np.ones(33, np.float32))
    ids = up(np.array([1, 4, 4, 0, 3], np.int32))
    q = up(rng.normal(size=(1, 2, 9, 8)).astype(np.float32))
    before = be._stats.downloads
    be.gelu_backward(x, be.gelu(x, "none"), "none")
    be.softmax_backward(x, be.softmax(x))
    y, mean, rstd = be.layer_norm(x, g, g, 1e-5)
    be.layer_norm_backward(y, x, g, mean, rstd)
    be.embedding_backward(be.embedding(x, ids), ids, 5)
    loss, lse = be.cross_entropy(x, ids)
    be.cross_entropy_backward(loss, x, ids, lse)
    out, probs = be.attention(q, q, q, 0.3, True)
    be.attention_backward(out, q, q, q, probs, 0.3)
    out, lse = be.flash_attention(q, q, q, 0.3, True)
    be.flash_attention_backward(out, q, q, q, out, lse, 0.3, True)
    qkv = up(rng.normal(size=(2, 9, 24)).astype(np.float32))
    for flash in (False, True):
        o, stat = be.attention_qkv(qkv, 2, 0.3, True, flash)
        be.attention_qkv_backward(o, qkv, o, stat, 2, 0.3, True, flash)
    assert be._stats.downloads == before
    assert np.isfinite(out.numpy()).all()


@pytest.mark.parametrize("form", ["tanh", "none"])
def test_gelu_softmax(be: OpenCLBackend, form: str) -> None:
    rng = np.random.default_rng(1)
    for dtype in _dtypes(be):
        x = rng.normal(0, 3, (3, 4097)).astype(dtype)
        x[0, :3] = (-80, 80, -np.inf)
        fin = np.where(np.isinf(x), 0, x).astype(dtype)
        ref_y, ref_g = gelu_ref(fin, form)
        _close(F.gelu(be.from_numpy(fin), form), ref_y, dtype, f"gelu {form}")
        dy = rng.normal(size=x.shape).astype(dtype)
        got = F.gelu_backward(be.from_numpy(dy), be.from_numpy(fin), form)
        _close(got, dy * ref_g, dtype, "gelu_backward")
        _close(F.softmax(be.from_numpy(x)), softmax_ref(x), dtype, "softmax")


def test_layer_norm_cross_entropy_embedding(be: OpenCLBackend) -> None:
    rng = np.random.default_rng(2)
    for dtype in _dtypes(be):
        x = rng.normal(size=(130, 65)).astype(dtype)
        g, b = (rng.normal(size=65).astype(dtype) for _ in range(2))
        y, mean, rstd = F.layer_norm(*map(be.from_numpy, (x, g, b)), 1e-5)
        x64 = x.astype(np.float64)
        xh = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
        _close(y, xh * g + b, dtype, "layer_norm", scale=10)
        dy = rng.normal(size=x.shape).astype(dtype)
        _, dgamma, dbeta = F.layer_norm_backward(be.from_numpy(dy), be.from_numpy(x),
                                                 be.from_numpy(g), mean, rstd)  # fmt: skip
        _close(dgamma, (dy * xh).sum(0), dtype, "dgamma", scale=30)
        _close(dbeta, dy.astype(np.float64).sum(0), dtype, "dbeta", scale=10)
        targets = np.array([3, -1, 64, 0, -1] * 26, np.int64)
        loss, lse = F.cross_entropy(be.from_numpy(x), be.from_numpy(targets))
        ref_lse = np.log(np.exp(x64).sum(-1))
        ref = np.where(targets < 0, 0, ref_lse - x64[np.arange(130), np.maximum(targets, 0)])
        _close(loss, ref, dtype, "cross_entropy", scale=10)
        ids = be.from_numpy(targets.clip(0))
        dtab = [F.embedding_backward(be.from_numpy(x), ids, 65).numpy() for _ in range(2)]
        expected = np.zeros((65, 65))
        np.add.at(expected, targets.clip(0), x64)  # id 0 repeats 78 times: blocked sums
        _close(be.from_numpy(dtab[0]), expected, dtype, "embedding_backward", scale=10)
        np.testing.assert_array_equal(dtab[1].view(np.uint8), dtab[0].view(np.uint8))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_attention_both_modes(be: OpenCLBackend, causal: bool) -> None:
    rng = np.random.default_rng(3)
    for dtype in _dtypes(be):
        for shape in ((1, 1, 1, 4), (2, 2, 65, 32)):
            q, k, v, do = (rng.normal(size=shape).astype(dtype) for _ in range(4))
            scale = 1 / math.sqrt(shape[-1])
            ref = attention_ref(q, k, v, do, scale, causal)
            tq, tk, tv, tdo = map(be.from_numpy, (q, k, v, do))
            out, probs = F.attention(tq, tk, tv, scale, causal)
            _close(out, ref["out"], dtype, f"attention {shape}", scale=3)
            grads = F.attention_backward(tdo, tq, tk, tv, probs, scale)
            fout, lse = F.flash_attention(tq, tk, tv, scale, causal)
            _close(fout, ref["out"], dtype, f"flash {shape}", scale=3)
            _close(lse, ref["lse"], dtype, f"flash lse {shape}", scale=3)
            fgrads = F.flash_attention_backward(tdo, tq, tk, tv, fout, lse, scale, causal)
            for name, g, fg in zip(("dq", "dk", "dv"), grads, fgrads, strict=True):
                _close(g, ref[name], dtype, f"attention_backward {name} {shape}", scale=10)
                _close(fg, ref[name], dtype, f"flash backward {name} {shape}", scale=10)


def test_flash_head_dim_limit_raises_before_launch(be: OpenCLBackend) -> None:
    q = be.from_numpy(np.zeros((1, 1, 2, 130), np.float32))
    launches = be._stats.launches
    with pytest.raises(ShapeError, match=r"^\[flash_attention\].*D=130"):
        F.flash_attention(q, q, q, 1.0, True)
    assert be._stats.launches == launches


_FLASH_CPU = {"flash_forward_rows", "flash_backward_dq_rows", "flash_backward_dkdv_rows"}
_FLASH_GPU = {"flash_forward", "flash_backward_dq", "flash_backward_dkdv"}


def _flash_check_shapes(backend: OpenCLBackend, what: str) -> None:
    """Flash forward and backward against the float64 reference, in shapes that hit the
    partial key tiles (T=13, 65) and the scalar tail of the D loop (D=6, 33)."""
    rng = np.random.default_rng(17)
    for dtype in _dtypes(backend):
        for shape in ((1, 1, 1, 4), (1, 3, 13, 6), (2, 2, 65, 33)):
            for causal in (True, False):
                q, k, v, do = (rng.normal(size=shape).astype(dtype) for _ in range(4))
                scale = 1 / math.sqrt(shape[-1])
                ref = attention_ref(q, k, v, do, scale, causal)
                tq, tk, tv, tdo = map(backend.from_numpy, (q, k, v, do))
                out, lse = F.flash_attention(tq, tk, tv, scale, causal)
                tag = f"{what} {shape} causal={causal}"
                _close(out, ref["out"], dtype, f"flash {tag}", scale=3)
                _close(lse, ref["lse"], dtype, f"flash lse {tag}", scale=3)
                grads = [
                    [
                        g.numpy()
                        for g in F.flash_attention_backward(
                            tdo, tq, tk, tv, out, lse, scale, causal
                        )
                    ]
                    for _ in range(2)
                ]
                rtol, atol = TOL[np.dtype(dtype)]
                for name, g, g2 in zip(("dq", "dk", "dv"), *grads, strict=True):
                    assert_close(g, ref[name], rtol=rtol * 10, atol=atol * 10, msg=f"{name} {tag}")
                    np.testing.assert_array_equal(g.view(np.uint8), g2.view(np.uint8))


@pytest.mark.parametrize("group", [96, 352])
def test_flash_cpu_shaped_kernels_on_cpu_device(group: int) -> None:
    """On PoCL the host picks the barrier-free one-row-per-thread flash kernels of
    flash_attention_cpu.cl; they are deterministic (bitwise equal reruns)."""
    backend = OpenCLBackend(0, group_size=group)
    if not backend.runtime.capabilities.is_cpu:
        pytest.skip("the device is a GPU: the CPU-shaped flash kernels are not chosen")
    _flash_check_shapes(backend, f"cpu kernels @{group}")
    used = {key[-1] for key in backend._kernels}
    assert _FLASH_CPU <= used and not used & _FLASH_GPU, used


@pytest.mark.parametrize("group", [96, 352])
def test_flash_gpu_shaped_kernels_on_cpu_device(group: int) -> None:
    """The tiled flash kernels that GPUs and Metal run keep working when forced on PoCL."""
    backend = OpenCLBackend(0, group_size=group)
    backend.runtime.capabilities = backend.runtime.capabilities.shaped_for(cpu=False)
    _flash_check_shapes(backend, f"gpu kernels @{group}")
    used = {key[-1] for key in backend._kernels}
    assert _FLASH_GPU <= used and not used & _FLASH_CPU, used
