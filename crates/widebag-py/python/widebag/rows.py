"""SciPy matrices and NumPy arrays as the arrays widebag reads: CSR with int64 row pointers,
int32 ids and float32 values. SciPy's own int32 ids and float32 values pass without a copy;
other dtypes are converted once (a copy), and anything that is not a sparse matrix or a 1-D
array of labels is refused with ``widebag.DataError`` naming it."""

from collections import namedtuple

import numpy as np

from .errors import DataError

Csr = namedtuple("Csr", "indptr indices data shape name")

__all__ = ["Csr", "csr", "labels"]


def csr(matrix, name):
    """``matrix`` (any ``scipy.sparse`` matrix or array) as CSR arrays."""
    try:
        import scipy.sparse as sp
    except ImportError as e:  # pragma: no cover - scipy is a dependency
        raise DataError(f"{name}: scipy is needed for sparse matrices") from e
    if not sp.issparse(matrix):
        raise DataError(
            f"{name}: a scipy.sparse matrix (csr_matrix or csr_array) is expected, got "
            f"{type(matrix).__name__}"
        )
    if matrix.ndim != 2:
        raise DataError(f"{name}: a 2-D matrix is expected")
    m = matrix.tocsr()
    if not np.issubdtype(m.dtype, np.number) or np.issubdtype(m.dtype, np.complexfloating):
        raise DataError(f"{name}: values of dtype {m.dtype} (a real number type is expected)")
    if m.shape[1] >= 2**32:
        raise DataError(f"{name}: {m.shape[1]} columns: widebag's ids are 32-bit")
    indices = m.indices
    if indices.dtype != np.int32:
        indices = indices.astype(np.int32)  # column ids below 2**31 here: checked above
    return Csr(
        np.ascontiguousarray(m.indptr, dtype=np.int64),
        np.ascontiguousarray(indices),
        np.ascontiguousarray(m.data, dtype=np.float32),
        (int(m.shape[0]), int(m.shape[1])),
        name,
    )


def labels(values, name="targets"):
    """A 1-D array of integer class labels, one per row."""
    a = np.asarray(values)
    if a.ndim != 1:
        raise DataError(f"{name}: labels are a 1-D array, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        if np.issubdtype(a.dtype, np.floating) and np.all(np.isfinite(a)) and np.all(a == np.round(a)):
            a = a.astype(np.int64)
        else:
            raise DataError(f"{name}: labels must be integers, got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.int64)
