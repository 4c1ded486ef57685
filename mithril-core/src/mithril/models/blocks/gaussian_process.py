"""Gaussian-process regression from kernel matrices: ``GaussProcessRegressionCore`` (posterior mean and
standard deviation at test points, and the negative log marginal likelihood) and ``GPRLoss`` (the negative
log marginal likelihood alone, to fit hyper-parameters or noise by gradient descent). Kernel matrices come
from any kernel block (``RBFKernel``, ``PolynomialKernel``...); the results are scikit-learn's
``GaussianProcessRegressor(kernel, alpha=s, optimizer=None)`` with ``normalize_y=False``.

The triangular solves ``L^-1 b`` that GP regression needs come from the ``cholesky`` primitive alone: the
Cholesky factor of ``[[K, B], [B^T, c I]]`` has ``B^T L^-T`` as its lower-left block (for any ``c`` that
keeps the matrix positive definite, here ``c = 2 |B|^2 / lambda_min(K) + 1``, outside the gradient), so
every backend with ``cholesky`` and ``eigvalsh`` runs it forward and backward.

Example:
    >>> from mithril.models import GaussProcessRegressionCore, GPRLoss
    >>> GaussProcessRegressionCore().output_keys
    ['loss', 'prediction', 'confidence']
    >>> GPRLoss().input_keys
    ['label', 'k', 's', 'mu']
"""

from __future__ import annotations

import math
from typing import Any

from ...framework.keys import IOKey
from ...framework.model import Model
from ._masks import as_float
from ._util import op
from .tensor_ops import _identity_mask

__all__ = ["GPRLoss", "GaussProcessRegressionCore"]


def _eye_like(model: Model, matrix: Any, axis: int = 0) -> Any:
    """The identity matrix (float) whose size is ``matrix.shape[axis]``."""
    positions = op(model, "positions", matrix, axis=axis)
    return as_float(model, _identity_mask(model, positions, positions))


def _solve(model: Model, k: Any, rhs: Any) -> tuple[Any, Any]:
    """``(log det K / 2, (L^-1 rhs)^T)`` for the Cholesky factor ``L`` of ``K`` ``[N, N]`` and ``rhs``
    ``[N, W]``, through one Cholesky factorisation of ``[[K, rhs], [rhs^T, c I]]`` (see the module)."""
    rhs_t = op(model, "swapaxes", rhs)  # [W, N]
    smallest = op(model, "min", op(model, "eigvalsh", k))
    bound = op(
        model,
        "add",
        op(model, "divide", op(model, "multiply", op(model, "sum", op(model, "square", rhs)), 2.0), smallest),
        1.0,
    )
    corner = op(model, "multiply", _eye_like(model, rhs, axis=1), op(model, "stop_gradient", bound))  # [W, W]
    top = op(model, "concat", k, rhs, axis=1, n=2)
    bottom = op(model, "concat", rhs_t, corner, axis=1, n=2)
    factor = op(model, "cholesky", op(model, "concat", top, bottom, axis=0, n=2))  # [P, P], P = N + W
    columns = op(model, "positions", factor, axis=1)
    first = _identity_mask(model, op(model, "positions", k, axis=0), columns)  # [N, P]: rows 0..N-1 of I_P
    shifted = op(
        model, "add", op(model, "positions", rhs, axis=1), op(model, "size", op(model, "positions", k, axis=0))
    )
    last = _identity_mask(model, shifted, columns)  # [W, P]: rows N..P-1 of I_P
    select_first = as_float(model, first)
    solved = op(
        model, "matmul", op(model, "matmul", as_float(model, last), factor), op(model, "swapaxes", select_first)
    )  # [W, N]
    diagonal = op(model, "sum", op(model, "where", _identity_mask(model, columns, columns), factor, 0.0), axis=1)  # [P]
    half_log_det = op(model, "sum", op(model, "log", op(model, "matmul", select_first, diagonal)))
    return half_log_det, solved


def _noisy(model: Model) -> Any:
    """``k + s * I`` for the inputs ``k`` ``[N, N]`` and ``s`` (scalar)."""
    k = IOKey("k", shape=["N", "N"])
    return op(model, "add", k, op(model, "multiply", _eye_like(model, k), IOKey("s")))


def _negative_log_likelihood(model: Model, half_log_det: Any, projected: Any) -> Any:
    """``|L^-1 (y - mu)|^2 / 2 + log det(K) / 2 + N log(2 pi) / 2`` from ``projected = L^-1 (y - mu)`` [N]."""
    n = op(model, "cast", op(model, "size", projected), dtype="float")  # int * float is float32 on PyTorch
    constant = op(model, "multiply", n, 0.5 * math.log(2.0 * math.pi))
    fit = op(model, "multiply", op(model, "sum", op(model, "square", projected)), 0.5)
    return op(model, "add", op(model, "add", fit, half_log_det), constant)


def _residual() -> tuple[IOKey, Any]:
    return IOKey("label", shape=["N", 1]), IOKey("mu")


class GPRLoss(Model):
    """The negative log marginal likelihood of training targets ``label`` ``[N, 1]`` under a Gaussian
    process with prior mean ``mu`` (scalar), kernel matrix ``k`` ``[N, N]`` and noise variance ``s``:
    ``(y - mu)^T (K + s I)^-1 (y - mu) / 2 + log det(K + s I) / 2 + N log(2 pi) / 2``, which is
    ``-GaussianProcessRegressor(alpha=s).log_marginal_likelihood_value_``. Differentiable in ``k``, ``s``,
    ``label`` and ``mu``.

    >>> GPRLoss().output_keys
    ['output']
    """

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self._declare_keys("label", "k", "s", "mu")
        label, mu = _residual()
        half_log_det, solved = _solve(self, _noisy(self), op(self, "subtract", label, mu))
        self.expose(_negative_log_likelihood(self, half_log_det, op(self, "index", solved, key=0)), "output")
        self._cin = self._keys["label"]


class GaussProcessRegressionCore(Model):
    """Gaussian-process regression from kernel matrices: training targets ``label`` ``[N, 1]``, their
    kernel ``k`` ``[N, N]``, the noise variance ``s`` (scikit-learn's ``alpha``), the prior mean ``mu``
    (scalar), the kernel between training and test inputs ``k_star`` ``[N, M]`` and the test inputs' own
    kernel values ``k_star_diag`` ``[M]`` (ones for ``RBFKernel``). Outputs: ``prediction`` ``[M, 1]``, the
    posterior mean ``mu + k_star^T (K + s I)^-1 (y - mu)``; ``confidence`` ``[M, 1]``, the posterior
    standard deviation; ``loss``, the negative log marginal likelihood (``GPRLoss``). These are
    scikit-learn's ``predict(X, return_std=True)`` and ``-log_marginal_likelihood_value_``.

    >>> GaussProcessRegressionCore().input_keys
    ['label', 'k', 's', 'mu', 'k_star', 'k_star_diag']
    """

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self._declare_keys("label", "k", "s", "mu", "k_star", "k_star_diag")
        label, mu = _residual()
        k_star = IOKey("k_star", shape=["N", "M"])
        rhs = op(self, "concat", op(self, "subtract", label, mu), k_star, axis=1, n=2)  # [N, 1 + M]
        half_log_det, solved = _solve(self, _noisy(self), rhs)
        projected = op(self, "index", solved, key=0)  # L^-1 (y - mu): [N]
        projected_star = op(self, "index", solved, key=slice(1, None))  # (L^-1 k_star)^T: [M, N]
        mean = op(self, "add", op(self, "matmul", projected_star, op(self, "unsqueeze", projected, axis=1)), mu)
        variance = op(
            self,
            "subtract",
            IOKey("k_star_diag", shape=["M"]),
            op(self, "sum", op(self, "square", projected_star), axis=1),
        )
        std = op(self, "sqrt", op(self, "maximum", variance, 1e-12))  # clamped: rounding can make it <= 0
        self.expose(_negative_log_likelihood(self, half_log_det, projected), "loss", canonical=False)
        self.expose(mean, "prediction")
        self.expose(op(self, "unsqueeze", std, axis=1), "confidence", canonical=False)
        self._cin = self._keys["label"]
