"""dispatch: closures and datasets on a cluster of workers, through one dispatcher.

The Python face of the dispatch dispatcher (see the repository README and docs/users/python.md):

* :class:`Coordinator` schedules Python functions on workers and fetches their results
  (TensorFlow's ``ClusterCoordinator``);
* :class:`Worker` / ``python3 -m dispatch.worker`` runs them, and produces the elements
  of Python datasets;
* :class:`Dataset`, :func:`register_dataset` and :func:`read` define and read datasets
  with dynamic sharding (TensorFlow's ``tf.data.experimental.service``).

Closures and datasets travel pickled and run on the workers: only connect programs
that trust each other, and give a dispatcher that other machines can reach a token.
"""

from dispatch import _dispatch
from dispatch.errors import (AlreadyExistsError, CancelledError, DataLossError,
                             DeadlineExceededError, DispatchError, FailedPreconditionError,
                             InsecureConnectionWarning, InternalError, InvalidArgumentError,
                             NotFoundError, RemoteError, ResourceExhaustedError,
                             TransientError, UnauthenticatedError, UnavailableError,
                             error_for_status)

_dispatch.set_error_factory(error_for_status)

from dispatch.coordinator import Coordinator, PerWorkerResource, RemoteValue  # noqa: E402
from dispatch._worker import Worker, current_closure  # noqa: E402
from dispatch.data import (Dataset, DatasetIterator, from_dataset_id, read,  # noqa: E402
                           register_dataset)

__version__ = "0.1.0"

__all__ = [
    "Coordinator", "RemoteValue", "PerWorkerResource", "Worker", "current_closure",
    "Dataset", "DatasetIterator", "register_dataset", "read", "from_dataset_id",
    "DispatchError", "InvalidArgumentError", "NotFoundError", "AlreadyExistsError",
    "FailedPreconditionError", "ResourceExhaustedError", "UnavailableError", "DataLossError",
    "InternalError", "UnauthenticatedError", "CancelledError", "DeadlineExceededError",
    "RemoteError", "TransientError", "InsecureConnectionWarning",
]
