"""A ClusterCoordinator-style training loop, with dispatch.

Each worker builds its own data iterator once (a per-worker resource); every step is
a closure that computes a gradient on the next batch of its worker's data; the
coordinator applies the gradients, joins at the end of each epoch, and prints the
loss. The model is a linear regression in numpy, fitted to y = 3x + 2.

    ./scripts/start.sh                          # a dispatcher on 127.0.0.1:5050
    PYTHONPATH=build/python python3 clients/python/examples/training_loop.py
"""

import sys

import numpy

import dispatch

ADDRESS = sys.argv[1] if len(sys.argv) > 1 else "tcp:127.0.0.1:5050"
STEPS_PER_EPOCH = 20
EPOCHS = 5


def make_batches(seed):
    """A worker's endless stream of (x, y) batches: its per-worker dataset."""
    rng = numpy.random.default_rng(seed)

    def batches():
        while True:
            x = rng.uniform(-1, 1, size=64)
            yield x, 3 * x + 2 + rng.normal(0, 0.01, size=64)

    return batches()


def gradient(batches, weights):
    """One step on this worker's next batch: the loss and the gradient of (w, b)."""
    x, y = next(batches)
    error = weights[0] * x + weights[1] - y
    return float(numpy.mean(error ** 2)), numpy.array([numpy.mean(2 * error * x),
                                                       numpy.mean(2 * error)])


def main():
    with dispatch.Worker(ADDRESS), dispatch.Worker(ADDRESS), \
            dispatch.Coordinator(ADDRESS) as coordinator:
        batches = coordinator.create_per_worker_resource(make_batches, 7)
        weights = numpy.zeros(2)
        for epoch in range(EPOCHS):
            losses = []
            for _ in range(STEPS_PER_EPOCH):
                loss, grad = coordinator.schedule(gradient, args=(batches, weights)).fetch()
                weights -= 0.3 * grad
                losses.append(loss)
            coordinator.join()
            print(f"epoch {epoch}: loss {numpy.mean(losses):.5f}")
    print(f"fitted w={weights[0]:.3f} b={weights[1]:.3f}")
    assert abs(weights[0] - 3) < 0.1 and abs(weights[1] - 2) < 0.1, "the model did not fit"


if __name__ == "__main__":
    main()
