"""The shared conformance suite on the C backend: every primitive, forward (float32, float64) and
gradients (float64), compared with plain-NumPy references (no other backend needed)."""

import mithril as ml
from mithril_testing import BackendConformanceTests

UNSUPPORTED = frozenset({
    "lambda", "cholesky", "cholesky_grad", "eigvalsh", "eigvalsh_grad", "unique", "item", "to_list",
    "to_tuple", "lstm_recurrence_grad", "matmul_grad_left", "matmul_grad_right", "cast_like",
})  # fmt: skip
"""A user Python callable cannot run inside generated C; the LAPACK-style factorisations have no C kernel;
``unique`` has a length known only at run time and ``item``/``to_list``/``to_tuple`` give Python values
(see the capability table in README.md). ``lstm_recurrence`` runs as its decomposition (unrolled cells,
differentiated cell by cell), so its backpropagation-through-time helper has no kernel. ``matmul_grad_left`` /
``matmul_grad_right`` are emitted only for operands of unknown rank, which a static-shape backend never has.
``cast_like`` casts to another tensor's dtype, known only when a model runs (C has one float dtype per program).
The run-time-shape variants (``reshape_to``, ``randn_of``, ``arange_between``) run here when shapes are static:
their shapes fold and they compile as the base primitive."""


class TestCConformance(BackendConformanceTests):
    backend_factory = staticmethod(lambda dtype: ml.CBackend(dtype=dtype, seed=0, threads=1))
    dtypes = (ml.float32, ml.float64)
    grad_dtypes = (ml.float32, ml.float64)
    unsupported = UNSUPPORTED
