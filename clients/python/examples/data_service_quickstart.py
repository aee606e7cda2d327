"""The tf.data service quick start, with dispatch.

Defines a dataset in Python, registers it with the dispatcher, and reads it with
DYNAMIC sharding: each of the 10 splits goes to one of the two workers this program
embeds, and every element is read exactly once.

    ./scripts/start.sh                          # a dispatcher on 127.0.0.1:5050
    PYTHONPATH=build/python python3 clients/python/examples/data_service_quickstart.py
"""

import sys

import dispatch

ADDRESS = sys.argv[1] if len(sys.argv) > 1 else "tcp:127.0.0.1:5050"


def squares(split):
    """The elements of one split: the squares of 100*split .. 100*split+99."""
    for i in range(100 * split, 100 * split + 100):
        yield i * i


def main():
    # Workers usually run elsewhere (python3 -m dispatch.worker); two in-process ones
    # keep the example self-contained.
    with dispatch.Worker(ADDRESS), dispatch.Worker(ADDRESS):
        dataset = dispatch.Dataset(squares, num_splits=10)
        dataset_id = dispatch.register_dataset(ADDRESS, dataset)
        elements = list(dispatch.from_dataset_id("dynamic", ADDRESS, dataset_id))
    assert sorted(elements) == [i * i for i in range(1000)], "an element was lost or repeated"
    print(f"read {len(elements)} elements of dataset {dataset_id}, sum {sum(elements)}")


if __name__ == "__main__":
    main()
