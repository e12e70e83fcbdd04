"""seqtape.Tensor and NumPy: zero-copy both ways, and what is refused."""

import numpy as np
import pytest

import seqtape


def data_ptr(a):
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numpy_round_trip_shares_memory(dtype):
    a = np.arange(24, dtype=dtype).reshape(2, 3, 4)
    t = seqtape.Tensor(a)
    assert t.shape == (2, 3, 4)
    assert t.dtype == np.dtype(dtype).name
    back = np.asarray(t)  # the buffer protocol
    assert back.dtype == dtype
    assert data_ptr(back) == data_ptr(a)
    assert data_ptr(t.numpy()) == data_ptr(a)
    np.testing.assert_array_equal(back, a)
    a[1, 2, 3] = -5  # one memory: a write shows through the tensor
    assert np.asarray(t)[1, 2, 3] == -5


def test_tensor_keeps_the_array_alive():
    t = seqtape.Tensor(np.full((1000,), 2.5, dtype=np.float32))  # no other reference
    big = [np.ones(1000, dtype=np.float32) for _ in range(50)]  # reuse any freed memory
    assert float(np.asarray(t).sum()) == 2500.0
    del big


def test_results_cross_to_numpy_without_a_copy():
    t = seqtape.Tensor(np.ones((3, 4))) * 2.0
    view = t.numpy()
    assert data_ptr(view) == data_ptr(np.asarray(t))
    del t  # the view keeps the tensor's memory alive
    np.testing.assert_array_equal(view, np.full((3, 4), 2.0))


def test_non_contiguous_arrays_are_refused():
    a = np.zeros((4, 6), dtype=np.float32)
    with pytest.raises(ValueError, match="not C-contiguous.*ascontiguousarray"):
        seqtape.Tensor(a[:, ::2])
    with pytest.raises(ValueError, match="not C-contiguous"):
        seqtape.Tensor(a.T)
    seqtape.Tensor(np.ascontiguousarray(a.T))  # the documented way


def test_wrong_dtypes_are_refused():
    with pytest.raises(TypeError, match="int64.*float32 or float64"):
        seqtape.Tensor(np.arange(3, dtype=np.int64))
    with pytest.raises(TypeError, match="float16"):
        seqtape.Tensor(np.zeros(3, dtype=np.float16))


def test_read_only_arrays_are_refused():
    a = np.zeros(3)
    a.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        seqtape.Tensor(a)


def test_lists_become_float64():
    t = seqtape.Tensor([[1, 2], [3, 4]])
    assert t.dtype == "float64" and t.shape == (2, 2)


def test_shapes_that_do_not_match_raise_value_error():
    a = seqtape.Tensor(np.ones((2, 3)))
    b = seqtape.Tensor(np.ones((4, 5)))
    with pytest.raises(ValueError, match=r"matmul.*\[2,3\].*\[4,5\]"):
        a @ b
    with pytest.raises(ValueError, match=r"\[2,3\].*\[4,5\]"):
        a + b
    with pytest.raises(ValueError, match="float32.*float64|float64.*float32"):
        a + seqtape.Tensor(np.ones((2, 3), dtype=np.float32))
