"""Classic models of Mithril's library, composed from primitives and trained with the compile-anywhere
workflow: ``LogisticRegression``, ``PolynomialRegression``, ``LinearSVM``, ``KernelizedSVM`` with the
kernels ``RBFKernel`` and ``PolynomialKernel``. Parameters follow scikit-learn where it has the model
(``coef_`` is ``weight``, ``intercept_`` is ``bias``), so fitted scikit-learn models load.

Example:
    >>> from mithril.models import KernelizedSVM, RBFKernel
    >>> KernelizedSVM(RBFKernel(gamma=0.5)).input_keys
    ['input', 'support_vectors', 'weight', 'bias']
"""

from __future__ import annotations

from typing import Any

from ... import validation
from ...errors import ArgumentError
from ...framework.keys import IOKey
from ...framework.model import Model
from ._util import op, param
from .linear import Linear
from .tensor_ops import DistanceMatrix, PolynomialFeatures

__all__ = ["LogisticRegression", "PolynomialRegression", "LinearSVM", "RBFKernel", "PolynomialKernel", "KernelizedSVM"]


class LogisticRegression(Model):
    """``output = input @ weight.T + bias`` (the logits, ``[N, 1]``) and ``probs_output = sigmoid(output)``;
    train ``output`` with ``BinaryCrossEntropy()`` (logits). ``weight`` ``[1, d]`` is scikit-learn's
    ``coef_``, ``bias`` its ``intercept_``.

    >>> LogisticRegression().output_keys
    ['probs_output', 'output']
    """

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        linear = Linear(1)
        self |= linear(input=IOKey("input"), weight="weight", bias="bias")
        self.expose(op(self, "sigmoid", linear.output), "probs_output", canonical=False)
        self.expose(linear.output, "output")
        self._cin = self._keys["input"]


class PolynomialRegression(Model):
    """Linear regression on ``PolynomialFeatures(degree)`` of ``input`` ``[N, in_features]``:
    ``output`` ``[N, dimension]``.

    >>> PolynomialRegression(degree=2, dimension=1, in_features=1).input_keys
    ['input', 'weight', 'bias']
    """

    def __init__(self, degree: int, dimension: int = 1, in_features: int | None = None, *, name: str | None = None) -> None:
        super().__init__(name=name)
        features = PolynomialFeatures(degree, in_features)
        self |= features(input=IOKey("input"))
        self |= Linear(dimension)(input=features.output, weight="weight", bias="bias", output=IOKey("output"))
        self._cin = self._keys["input"]


class LinearSVM(Model):
    """A linear support-vector machine: ``output = input @ weight.T + bias`` (the decision function,
    ``[N, 1]``) and ``decision_output`` its sign in {-1, +1}; train ``output`` with ``HingeLoss()`` (targets
    in {-1, +1}) plus ``L2`` on ``weight``.

    >>> LinearSVM().output_keys
    ['decision_output', 'output']
    """

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        linear = Linear(1)
        self |= linear(input=IOKey("input"), weight="weight", bias="bias")
        self.expose(op(self, "where", op(self, "less", linear.output, 0.0), -1.0, 1.0), "decision_output", canonical=False)
        self.expose(linear.output, "output")
        self._cin = self._keys["input"]


class _Kernel(Model):
    """``output[i, j] = k(left[i], right[j])`` for rows ``left`` ``[N, d]`` and ``right`` ``[M, d]``."""

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self._declare_keys("left", "right")
        self.expose(self._kernel(IOKey("left", shape=["N", "d"]), IOKey("right", shape=["M", "d"])), "output")

    def _kernel(self, left: IOKey, right: IOKey) -> Any:
        raise NotImplementedError


class RBFKernel(_Kernel):
    """``exp(-gamma * |left_i - right_j|^2)`` (scikit-learn's ``rbf_kernel``).

    >>> RBFKernel(gamma=0.1).input_keys
    ['left', 'right']
    """

    def __init__(self, gamma: float = 1.0, *, name: str | None = None) -> None:
        self.__dict__["gamma"] = validation.number("RBFKernel", "gamma", gamma, low=0.0)
        super().__init__(name=name)

    def _kernel(self, left: IOKey, right: IOKey) -> Any:
        distances = DistanceMatrix(squared=True)
        self |= distances(left=left, right=right)
        return op(self, "exp", op(self, "multiply", distances.output, -self.gamma))


class PolynomialKernel(_Kernel):
    """``(gamma * left_i . right_j + coef0) ** degree`` (scikit-learn's ``polynomial_kernel``).

    >>> PolynomialKernel(degree=2).input_keys
    ['left', 'right']
    """

    def __init__(self, degree: int = 3, gamma: float = 1.0, coef0: float = 1.0, *, name: str | None = None) -> None:
        self.__dict__["degree"] = validation.positive_int("PolynomialKernel", "degree", degree)
        self.__dict__["gamma"] = validation.number("PolynomialKernel", "gamma", gamma)
        self.__dict__["coef0"] = validation.number("PolynomialKernel", "coef0", coef0)
        super().__init__(name=name)

    def _kernel(self, left: IOKey, right: IOKey) -> Any:
        dots = op(self, "matmul", left, op(self, "swapaxes", right))  # swapaxes: torch.compile mis-traces transpose
        base = op(self, "add", op(self, "multiply", dots, self.gamma), self.coef0)
        return op(self, "power", base, float(self.degree))


class KernelizedSVM(Model):
    """A kernel machine: ``output = kernel(input, support_vectors) @ weight.T + bias`` (``[N, 1]``, the
    decision function); ``weight`` ``[1, S]`` is scikit-learn's ``SVC.dual_coef_``, ``support_vectors``
    its ``support_vectors_`` and ``bias`` its ``intercept_``.

    >>> KernelizedSVM(PolynomialKernel(2)).output_keys
    ['output']
    """

    def __init__(self, kernel: Model, *, name: str | None = None) -> None:
        super().__init__(name=name)
        if not isinstance(kernel, _Kernel):
            raise ArgumentError(f"KernelizedSVM: kernel must be RBFKernel(...) or PolynomialKernel(...), got {kernel!r}")
        self._declare_keys("input")
        self |= kernel(left=IOKey("input"), right=IOKey("support_vectors"))
        weight, bias = param("weight", shape=[1, "S"]), param("bias", shape=[1])
        self |= Linear(1)(input=kernel.output, weight=weight, bias=bias, output=IOKey("output"))
        self._cin = self._keys["input"]
