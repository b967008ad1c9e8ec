"""Tensor views, their errors, moves between devices, and the constructors."""

from __future__ import annotations

import numpy as np
import pytest
import riftco
from helpers import add_backend
from hypothesis import given
from hypothesis import strategies as st
from riftco import ops
from riftco.backends.cpu.backend import CPUBackend
from riftco.errors import DTypeError, ShapeError


class CPU2(CPUBackend):
    name = "cpu2"


class CPU32(CPUBackend):
    """A cpu-like backend without float64 (like Metal)."""

    name = "cpu32"
    dtypes = frozenset({np.dtype(np.float32), np.dtype(np.int32)})


def arange_tensor(*shape: int) -> tuple[riftco.Tensor, np.ndarray]:
    arr = np.arange(float(np.prod(shape))).reshape(shape)
    return riftco.tensor(arr), arr


# -- views share storage and version ------------------------------------------------------------
def test_views_share_storage_and_version():
    x, _ = arange_tensor(2, 3, 4)
    views = [
        x.reshape(6, 4),
        x.reshape(-1),
        x.transpose(0, 2),
        x.permute(2, 0, 1),
        x.T,
        x[1],
        x[:, 1:, ::2],
        x[..., None],
        x.expand_dims(0),
        x[:1].broadcast_to(5, 3, 4),
    ]
    for v in views:
        assert v.storage is x.storage and v.buffer is x.buffer
    x.bump_version()
    assert all(v.version == x.version == 1 for v in views)
    views[3].bump_version()  # a bump through any view is seen by the base
    assert x.version == 2


def test_view_sees_in_place_writes_to_base():
    x, arr = arange_tensor(3, 4)
    col = x[:, 2]
    ops.fill_(x, 7.0)
    assert col.tolist() == [7.0, 7.0, 7.0]
    assert x.reshape(4, 3)[3].tolist() == [7.0, 7.0, 7.0]


def test_view_values_match_numpy():
    x, arr = arange_tensor(2, 3, 4)
    assert x.permute(2, 0, 1).numpy().tolist() == arr.transpose(2, 0, 1).tolist()
    assert x.transpose(0, 2).numpy().tolist() == arr.swapaxes(0, 2).tolist()
    assert x.T.numpy().tolist() == arr.swapaxes(-1, -2).tolist()
    assert x.reshape(4, -1).numpy().tolist() == arr.reshape(4, 6).tolist()
    assert x.reshape((3, 8)).shape == (3, 8)
    b = x[:, :1, :].broadcast_to(2, 2, 3, 4)
    assert b.strides[0] == 0 and b.strides[2] == 0
    assert b.numpy().tolist() == np.broadcast_to(arr[:, :1, :], (2, 2, 3, 4)).tolist()


@pytest.mark.parametrize(
    "axis,shape", [(0, (1, 2, 3)), (1, (2, 1, 3)), (2, (2, 3, 1)), (-1, (2, 3, 1)), (-3, (1, 2, 3))]
)  # noqa: E501
def test_expand_dims(axis, shape):
    x, arr = arange_tensor(2, 3)
    e = x.expand_dims(axis)
    assert e.shape == shape and e.is_contiguous
    assert e.numpy().tolist() == np.expand_dims(arr, axis).tolist()
    assert x.T.expand_dims(axis).numpy().tolist() == np.expand_dims(arr.T, axis).tolist()


@pytest.mark.parametrize("axis", [3, -4, 10])
def test_expand_dims_out_of_range(axis):
    x, _ = arange_tensor(2, 3)
    with pytest.raises(ShapeError, match=r"^\[expand_dims\] axis"):
        x.expand_dims(axis)


def test_contiguity_flags():
    x, _ = arange_tensor(3, 4)
    assert x.is_dense and x.is_contiguous
    assert not x.T.is_contiguous
    assert x[1:].is_contiguous and not x[1:].is_dense  # offset != 0
    assert not x[:, ::2].is_contiguous
    assert not x[:1].broadcast_to(3, 4).is_contiguous
    assert x.T.contiguous().is_dense and x.contiguous() is x


# -- errors of views -------------------------------------------------------------------------------
def test_reshape_of_non_contiguous_view_says_call_contiguous():
    x, arr = arange_tensor(3, 4)
    with pytest.raises(ShapeError, match=r"^\[reshape\].*\(4, 3\).*\.contiguous\(\)"):
        x.T.reshape(12)
    assert x.T.contiguous().reshape(12).tolist() == arr.T.reshape(12).tolist()


@pytest.mark.parametrize("shape", [(5,), (2, 7), (-1, -1), (-1, 5), (0, -1), (-2, -6)])
def test_reshape_bad_sizes(shape):
    x, _ = arange_tensor(3, 4)
    with pytest.raises(ShapeError, match=r"^\[reshape\].*\(3, 4\)"):
        x.reshape(shape)


def test_bad_broadcast_names_shapes():
    x, _ = arange_tensor(2, 3)
    with pytest.raises(ShapeError, match=r"^\[broadcast_to\].*\(2, 3\).*\(2, 4\).*size 3"):
        x.broadcast_to(2, 4)
    with pytest.raises(ShapeError, match=r"^\[broadcast_to\].*lower rank"):
        x.broadcast_to(3)


def test_bad_permute_and_transpose():
    x, _ = arange_tensor(2, 3, 4)
    with pytest.raises(ShapeError, match=r"^\[permute\].*not a permutation"):
        x.permute(0, 0, 1)
    with pytest.raises(ShapeError, match=r"^\[permute\] axis 3 is out of range"):
        x.permute(0, 1, 3)
    with pytest.raises(ShapeError, match=r"^\[transpose\] needs rank >= 2"):
        riftco.tensor([1.0, 2.0]).transpose()


@pytest.mark.parametrize(
    "index,pattern",
    [
        ((slice(None, None, -1),), "step must be positive"),
        ((slice(None, None, 0),), "step must be positive; got 0"),
        ((0, 0, 0), r"too many indices \(3\) for shape \(3, 4\)"),
        ((3,), "index 3 is out of bounds for axis 0 with size 3"),
        ((0, -5), "index -5 is out of bounds for axis 1 with size 4"),
        ((Ellipsis, Ellipsis), "single ellipsis"),
        (([0, 1],), "unsupported index"),
        ((True,), "unsupported index"),
        ((1.0,), "unsupported index"),
    ],
)
def test_bad_getitem(index, pattern):
    x, _ = arange_tensor(3, 4)
    with pytest.raises(ShapeError, match=r"^\[getitem\] .*" + pattern):
        x[index]


def test_getitem_errors_are_riftco_errors():
    x, _ = arange_tensor(3, 4)
    with pytest.raises(ShapeError, match=r"^\[getitem\]"):
        x[0, 0, 0]
    assert issubclass(ShapeError, riftco.RiftcoError) and issubclass(ShapeError, ValueError)


# -- slicing with steps, against numpy -------------------------------------------------------------
_bound = st.one_of(st.none(), st.integers(-7, 7))
_slice = st.builds(slice, _bound, _bound, st.one_of(st.none(), st.integers(1, 4)))
_item = st.one_of(_slice, st.integers(-3, 2), st.just(None), st.just(Ellipsis))


@given(st.lists(_item, min_size=1, max_size=3))
def test_basic_slicing_matches_numpy(items):
    arr = np.arange(60.0).reshape(3, 4, 5)
    index = tuple(items)
    try:
        want = arr[index]
    except IndexError:
        return  # numpy refuses too (int out of range, two ellipses): checked above
    got = riftco.tensor(arr)[index]
    assert got.shape == want.shape
    assert got.numpy().tolist() == want.tolist()


@pytest.mark.parametrize(
    "index",
    [np.s_[::2], np.s_[1::3, 2:], np.s_[:, ::2], np.s_[5:1], np.s_[..., 1], np.s_[None, 1, None]],
)
def test_slicing_with_steps_examples(index):
    arr = np.arange(35.0).reshape(5, 7)
    got = riftco.tensor(arr)[index]
    assert got.shape == arr[index].shape and got.numpy().tolist() == arr[index].tolist()
    # a slice of a slice of a transposed view
    assert riftco.tensor(arr).T[1:6:2][::2].numpy().tolist() == arr.T[1:6:2][::2].tolist()


# -- metadata, host access, repr -----------------------------------------------------------------
def test_repr_shows_shape_dtype_device():
    x = riftco.zeros((2, 3), dtype="float64")
    assert repr(x) == "Tensor(shape=2x3, dtype=float64, device=cpu:0)"
    assert "shape=scalar" in repr(riftco.tensor(1.5)) and "float32" in repr(riftco.tensor(1.5))


def test_item_len_and_scalars():
    s = riftco.tensor(2.5)
    assert s.shape == () and s.ndim == 0 and s.item() == 2.5
    assert riftco.tensor([[4]]).item() == 4
    assert len(riftco.zeros((5, 2))) == 5
    with pytest.raises(TypeError):
        len(s)
    with pytest.raises(ShapeError, match=r"^\[item\].*\(2,\)"):
        riftco.tensor([1.0, 2.0]).item()
    x = riftco.zeros((2, 3), dtype="float64")
    assert x.size == 6 and x.nbytes == 48 and x.device == riftco.Device("cpu", 0)


# -- moving between devices --------------------------------------------------------------------
def test_to_another_device_copies(registry):
    cpu2 = add_backend(registry, CPU2)
    x = riftco.tensor(np.arange(6.0).reshape(2, 3))
    y = x.T.to("cpu2")
    assert y.backend is cpu2 and y.device == riftco.Device("cpu2", 0)
    assert y.storage is not x.storage and y.dtype == x.dtype == np.float64
    assert y.numpy().tolist() == np.arange(6.0).reshape(2, 3).T.tolist()
    ops.fill_(x, -1.0)
    assert y.numpy()[0, 0] == 0.0  # independent of the source
    back = y.to(riftco.device("cpu"))
    assert back.backend is x.backend and back.storage is not y.storage
    assert x.to("cpu") is x  # already there: nothing to copy


def test_to_refuses_dtype_the_target_lacks(registry):
    add_backend(registry, CPU32)
    x = riftco.tensor(np.ones(3))  # float64
    with pytest.raises(DTypeError, match=r"^\[to\].*'cpu32'.*float64.*float32"):
        x.to("cpu32")
    y = ops.cast(x, "float32").to("cpu32")
    assert y.dtype == np.float32 and y.tolist() == [1.0, 1.0, 1.0]


# -- constructors ------------------------------------------------------------------------------
def test_tensor_dtype_rules():
    assert riftco.tensor([1.0, 2.0]).dtype == np.float32
    assert riftco.tensor([1, 2]).dtype == np.int32
    assert riftco.tensor(np.array([1.0])).dtype == np.float64  # numpy keeps its dtype
    assert riftco.tensor(np.array([1], dtype=np.int64)).dtype == np.int64
    assert riftco.tensor([1, 2], dtype="float64").tolist() == [1.0, 2.0]
    t = riftco.tensor(riftco.tensor([[1.0, 2.0]]).T)
    assert t.shape == (2, 1) and t.is_dense
    assert riftco.tensor(np.zeros(2, dtype=np.float16)).dtype == np.float16  # kept, as numpy's
    with pytest.raises(DTypeError, match=r"^\[tensor\].*complex64"):
        riftco.tensor(np.zeros(2, dtype=np.complex64))
    with pytest.raises(DTypeError, match=r"is not a dtype"):
        riftco.tensor([1.0], dtype="not-a-dtype")


def test_constructors_shapes_and_values():
    assert riftco.ones(3).tolist() == [1.0, 1.0, 1.0]
    assert riftco.zeros((2, 1), dtype="int32").tolist() == [[0], [0]]
    assert riftco.full((), 4.0).shape == ()
    assert riftco.arange(4).tolist() == [0, 1, 2, 3] and riftco.arange(4).dtype == np.int32
    assert riftco.arange(1, 2, 0.25).tolist() == [1.0, 1.25, 1.5, 1.75]
    assert riftco.arange(0.5, 2).dtype == np.float32
    with pytest.raises(ShapeError, match=r"^\[arange\] step must be nonzero"):
        riftco.arange(0, 3, 0)


def test_randn_is_seeded_and_typed():
    a = riftco.randn((3, 4), seed=7)
    b = riftco.randn((3, 4), seed=7, dtype="float64")
    assert a.dtype == np.float32 and b.dtype == np.float64
    want = np.random.default_rng(7).standard_normal((3, 4))
    assert b.numpy().tolist() == want.tolist()
    assert a.numpy().tolist() == want.astype(np.float32).tolist()
    with pytest.raises(DTypeError, match=r"^\[randn\] needs a float dtype"):
        riftco.randn(2, dtype="int32")


def test_tensor_keeps_numpy_dtypes_and_defaults_python_numbers():
    """numpy says its dtype (arrays and scalars alike); Python numbers and lists get the
    defaults. A float64 scalar once became float32 (clip_grad_norm's host norm lost 8 digits)."""
    assert riftco.tensor(np.float64(1.1)).dtype == np.float64
    assert riftco.tensor(np.float64(1.1)).item() == 1.1
    assert riftco.tensor(np.int64(3)).dtype == np.int64
    assert riftco.tensor(np.float32(2.5)).dtype == np.float32
    assert riftco.tensor(np.arange(3, dtype=np.float64)).dtype == np.float64
    assert riftco.tensor(1.1).dtype == np.float32
    assert riftco.tensor([1, 2]).dtype == np.int32
    assert riftco.tensor(np.float64(1.1), dtype="float32").dtype == np.float32
