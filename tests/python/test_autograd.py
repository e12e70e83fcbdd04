"""The tape from Python: gradients of a composed function against NumPy finite differences,
gradcheck, and backward's rules."""

import numpy as np
import pytest

import seqtape


def mlp_loss_np(x, w1, b1, w2):
    h = np.tanh(x @ w1 + b1)
    return float((np.maximum(h @ w2, 0.0) * 0.5 + h.mean()).sum())


def mlp_loss(x, w1, b1, w2):
    h = seqtape.tanh(x @ w1 + b1)
    return (seqtape.relu(h @ w2) * 0.5 + h.mean()).sum()


def test_gradients_match_numpy_finite_differences():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s) for s in [(5, 4), (4, 6), (6,), (6, 3)]]
    params = [seqtape.Tensor(a.copy(), requires_grad=True) for a in arrays]
    loss = mlp_loss(*params)
    assert loss.item() == pytest.approx(mlp_loss_np(*arrays), rel=1e-12)
    loss.backward()
    eps = 1e-6
    for k, a in enumerate(arrays):
        numeric = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            plus = [x.copy() for x in arrays]
            minus = [x.copy() for x in arrays]
            plus[k][i] += eps
            minus[k][i] -= eps
            numeric[i] = (mlp_loss_np(*plus) - mlp_loss_np(*minus)) / (2 * eps)
        np.testing.assert_allclose(params[k].grad, numeric, rtol=1e-5, atol=1e-7)


def test_gradients_accumulate_until_zero_grad():
    w = seqtape.Tensor(np.array([1.0, 2.0]), requires_grad=True)
    (w * w).sum().backward()
    (w * w).sum().backward()
    np.testing.assert_array_equal(w.grad, [4.0, 8.0])  # 2w, twice
    w.zero_grad()
    assert w.grad is None


def test_gradcheck_passes_a_composed_function_and_fails_a_wrong_one():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    result = seqtape.gradcheck(lambda a, b: seqtape.log_softmax(seqtape.tanh(a @ b)), [x, w])
    assert result and result.passed and result.entries > 0

    class Wrong:  # a function whose value is read out of the tape: its gradient is missed
        def __call__(self, a, b):
            frozen = seqtape.Tensor(np.asarray(a).copy())
            return (frozen @ b) * 1.0 + a.sum() * 0.0

    assert seqtape.gradcheck(Wrong(), [x, w]).passed is False


def test_backward_twice_through_one_graph_is_refused():
    w = seqtape.Tensor(np.ones(3), requires_grad=True)
    loss = (w * 3.0).sum()
    loss.backward()
    with pytest.raises(ValueError, match="tape was cleared"):
        loss.backward()


def test_no_grad_records_nothing():
    w = seqtape.Tensor(np.ones(3), requires_grad=True)
    with seqtape.no_grad():
        y = (w * 2.0).sum()
    assert not y.requires_grad
    with pytest.raises(ValueError, match="does not require grad"):
        y.backward()
