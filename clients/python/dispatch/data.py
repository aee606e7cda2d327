"""Data: define datasets in Python and read them through the service (TensorFlow's
``tf.data.experimental.service``).

    def squares(split):                 # one split's elements
        for i in range(split * 100, (split + 1) * 100):
            yield i * i

    dataset_id = dispatch.register_dataset("tcp:127.0.0.1:5050",
                                           dispatch.Dataset(squares, num_splits=10))
    for element in dispatch.read("tcp:127.0.0.1:5050", dataset_id):
        ...

Python workers (``python3 -m dispatch.worker``) produce the elements: with
``processing_mode="dynamic"`` each split goes to one worker and every element is read
once; ``"off"`` has every worker produce the whole dataset; ``"file"``/``"data"``
shard statically by split index.
"""

from __future__ import annotations

import base64
import pickle
import sys
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, Union

import cloudpickle

from dispatch import _address, _dispatch, _serialize
from dispatch._worker import PYTHON_DATASET_KIND
from dispatch.errors import FailedPreconditionError

__all__ = ["Dataset", "register_dataset", "read", "from_dataset_id", "DatasetIterator"]

_SPEC_PREFIX = b"dispatch.python/"
_FORMATS = ("pickle", "bytes")


class Dataset:
    """A dataset whose elements Python workers produce.

    ``source``: a function ``fn(split) -> iterable of elements`` (travels pickled, like
    closures), or the name of a kind registered on the workers with
    ``Worker.register_dataset``. ``num_splits``: the splits are 0..num_splits-1 and
    ``fn`` receives the index; or ``splits``: a list of str (file names, shard names)
    and ``fn`` receives one of them. ``elements``: ``"pickle"`` (any picklable
    objects, numpy arrays included) or ``"bytes"`` (bytes-like elements, read back as
    bytes).
    """

    def __init__(self, source: Union[Callable[[Any], Iterable], str], *,
                 num_splits: Optional[int] = None, splits: Optional[Sequence[str]] = None,
                 elements: str = "pickle") -> None:
        if elements not in _FORMATS:
            raise ValueError(f"elements must be 'pickle' or 'bytes', got {elements!r}")
        if (num_splits is None) == (splits is None):
            if num_splits is None and splits is None:
                num_splits = 1
            else:
                raise ValueError("give num_splits or splits, not both")
        if num_splits is not None and (not isinstance(num_splits, int) or num_splits < 1):
            raise ValueError(f"num_splits must be a positive int, got {num_splits!r}")
        self.splits = [str(s) for s in splits] if splits is not None else None
        for split in self.splits or ():
            if not split or "\n" in split or split != split.strip():
                raise ValueError(f"a split name must be one non-empty line without surrounding "
                                 f"spaces, got {split!r}")
        self.num_splits = num_splits
        self.elements = elements
        if callable(source):
            self.kind = PYTHON_DATASET_KIND
            function = cloudpickle.dumps(source, protocol=_serialize.PROTOCOL)
            self._args = {"fn": base64.urlsafe_b64encode(function).decode()}
        elif isinstance(source, str) and source and source.isprintable() and " " not in source:
            self.kind = source
            self._args = {}
        else:
            raise TypeError(f"a Dataset needs a function or a kind name, got {source!r}")

    def definition(self) -> bytes:
        """The definition bytes registered with the dispatcher (kind, arguments, splits)."""
        args = dict(self._args, format=self.elements)
        if self.num_splits is not None:
            args["splits"] = str(self.num_splits)
        head = " ".join([self.kind] + [f"{k}={v}" for k, v in sorted(args.items())])
        return "\n".join([head] + list(self.splits or [])).encode()

    def element_spec(self) -> bytes:
        """The element spec registered with it: how readers decode the elements."""
        return _SPEC_PREFIX + self.elements.encode()


def register_dataset(address: str, dataset: Dataset, *, token: Optional[str] = None,
                     timeout: float = 30.0) -> int:
    """Registers ``dataset`` and returns its id; the same dataset gives the same id."""
    if not isinstance(dataset, Dataset):
        raise TypeError(f"register_dataset() needs a dispatch.Dataset, got {dataset!r}")
    address = _address.checked(address, token, "dispatch.register_dataset")
    return _dispatch.register_dataset(address, token or "", dataset.definition(),
                                      dataset.num_splits or 0, dataset.splits or [],
                                      dataset.element_spec(), timeout)


def _progress(iterator: Iterator[Any]) -> Iterator[Any]:
    """The iterator with a tqdm bar on stderr, when tqdm is installed and stderr a terminal."""
    if not sys.stderr.isatty():
        return iterator
    try:
        from tqdm import tqdm
    except ImportError:
        return iterator
    return iter(tqdm(iterator, unit=" elements", file=sys.stderr))


class DatasetIterator:
    """The elements of one job, in the order this consumer receives them.

    Iterate it (``for element in it``), ``close()`` it (or use it in a ``with``) to
    release the job client at the dispatcher early; it closes itself at the end.
    ``stats()``: job_id, job_client_id, elements, bytes, buffered.
    """

    _BATCH = 256

    def __init__(self, address: str, token: Optional[str], dataset_id: int, decode: str,
                 processing_mode: str, job_name: Optional[str], num_consumers: Optional[int],
                 consumer_index: Optional[int], copy: bool, open_timeout: float) -> None:
        if (num_consumers is None) != (consumer_index is None):
            raise ValueError("round-robin reading needs both num_consumers and consumer_index")
        if num_consumers is not None and not 0 <= consumer_index < num_consumers:  # type: ignore
            raise ValueError(f"consumer_index must be in [0, {num_consumers}), "
                             f"got {consumer_index}")
        self._decode = decode
        self._buffers = not copy or decode == "pickle"
        self._reader = _dispatch.Reader(address, token or "", dataset_id, processing_mode,
                                        job_name or "", num_consumers or 0,
                                        -1 if consumer_index is None else consumer_index,
                                        open_timeout)
        self._batch: list = []
        self._next = 0
        self._ended = False

    def __iter__(self) -> "DatasetIterator":
        return self

    def __next__(self) -> Any:
        if self._next == len(self._batch):
            if self._ended:
                raise StopIteration
            batch = self._reader.next_batch(self._BATCH, self._buffers)
            if batch is None:
                self._ended = True
                self._reader.close()
                raise StopIteration
            self._batch, self._next = batch, 0
        element = self._batch[self._next]
        self._batch[self._next] = None
        self._next += 1
        if self._decode == "pickle":
            return pickle.loads(memoryview(element))
        if self._buffers:
            return memoryview(element)
        return element

    def stats(self) -> dict:
        """job_id, job_client_id, elements and bytes returned, elements buffered."""
        return self._reader.stats()

    def close(self) -> None:
        """Stops reading and releases the job client. Idempotent."""
        self._ended = True
        self._reader.close()

    def __enter__(self) -> "DatasetIterator":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def read(address: str, dataset: Union[Dataset, int], processing_mode: str = "dynamic",
         job_name: Optional[str] = None, num_consumers: Optional[int] = None,
         consumer_index: Optional[int] = None, *, token: Optional[str] = None,
         copy: bool = True, progress: bool = True,
         open_timeout: float = 30.0) -> Iterator[Any]:
    """An iterator over a dataset read through the service.

    ``dataset``: a Dataset (registered first, idempotently) or a dataset id.
    ``processing_mode``: "off", "dynamic", "file", "data", "file_or_data" or "hint".
    ``job_name``: consumers with the same name share one job (None: a job of its own).
    ``num_consumers``/``consumer_index``: round-robin reading, each consumer gets every
    num_consumers-th batch of each round. Elements are Python objects for a pickled
    dataset, bytes otherwise; with ``copy=False`` a bytes dataset's elements are
    read-only memoryviews of the received buffers (no copy). ``progress``: a tqdm bar
    on stderr when tqdm is installed and stderr is a terminal.
    """
    address = _address.checked(address, token, "dispatch.read")
    if isinstance(dataset, Dataset):
        dataset_id = register_dataset(address, dataset, token=token, timeout=open_timeout)
        decode = dataset.elements
    elif isinstance(dataset, int):
        dataset_id = dataset
        try:
            spec = _dispatch.get_element_spec(address, token or "", dataset_id, open_timeout)
        except FailedPreconditionError:  # registered without one (not by this package): bytes
            spec = b""
        decode = spec[len(_SPEC_PREFIX):].decode() if spec.startswith(_SPEC_PREFIX) else "bytes"
    else:
        raise TypeError(f"read() needs a dispatch.Dataset or a dataset id, got {dataset!r}")
    iterator = DatasetIterator(address, token, dataset_id, decode, processing_mode, job_name,
                               num_consumers, consumer_index, copy, open_timeout)
    return _progress(iterator) if progress else iterator


def from_dataset_id(processing_mode: str, service: str, dataset_id: int,
                    job_name: Optional[str] = None, num_consumers: Optional[int] = None,
                    consumer_index: Optional[int] = None, **kwargs: Any) -> Iterator[Any]:
    """``read()`` with TensorFlow's ``from_dataset_id`` argument order."""
    return read(service, dataset_id, processing_mode, job_name, num_consumers, consumer_index,
                **kwargs)
