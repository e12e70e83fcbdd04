#!/usr/bin/python3
"""A micrograd-style example on seqtape's tape: a two-layer MLP learns the "moons" shaped
two-class problem with plain gradient descent, every gradient from backward(); then
seqtape.gradcheck confirms the model's gradients against central differences.

    PYTHONPATH=build/python /usr/bin/python3 examples/micrograd.py
"""

import numpy as np

import seqtape


def moons(n, rng):
    """Two interleaved half circles with noise: points X [n, 2] and labels y in {-1, 1}."""
    t = rng.uniform(0, np.pi, n)
    upper = rng.random(n) < 0.5
    x = np.where(upper, np.cos(t), 1 - np.cos(t))
    y = np.where(upper, np.sin(t), 0.5 - np.sin(t))
    points = np.stack([x, y], axis=1) + rng.normal(0, 0.1, (n, 2))
    return points, np.where(upper, 1.0, -1.0)


def forward(x, params):
    w1, b1, w2, b2 = params
    return seqtape.tanh(x @ w1 + b1) @ w2 + b2  # scores [n, 1]


def hinge_loss(scores, labels, params):
    """micrograd's: mean(relu(1 - y * score)) + 1e-4 * |W|^2."""
    data = seqtape.relu(1.0 - labels * scores).mean()
    return data + 1e-4 * sum((p * p).sum() for p in params)


def main():
    rng = np.random.default_rng(0)
    points, labels = moons(200, rng)
    x = seqtape.Tensor(points)
    y = seqtape.Tensor(labels.reshape(-1, 1))
    params = [seqtape.Tensor(a, requires_grad=True) for a in
              (rng.normal(0, 1, (2, 16)), np.zeros(16), rng.normal(0, 0.3, (16, 1)), np.zeros(1))]
    for step in range(200):
        loss = hinge_loss(forward(x, params), y, params)
        for p in params:
            p.zero_grad()
        loss.backward()
        lr = 1.0 - 0.9 * step / 200
        for p in params:
            p.numpy()[...] -= lr * p.grad  # in place: the tensor and the array share memory
        if step % 20 == 0 or step == 199:
            with seqtape.no_grad():
                accuracy = (np.sign(forward(x, params).numpy()[:, 0]) == labels).mean()
            print(f"step {step:3d}  loss {loss.item():.4f}  accuracy {accuracy:.1%}")
    y10 = seqtape.Tensor(labels[:10].reshape(-1, 1))
    check = seqtape.gradcheck(lambda xs, *ps: hinge_loss(forward(xs, ps), y10, ps),
                              [points[:10]] + [np.asarray(p) for p in params])
    print("gradcheck:", check)


if __name__ == "__main__":
    main()
