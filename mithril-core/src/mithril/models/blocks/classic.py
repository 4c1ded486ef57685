"""Classic models of Mithril's library, composed from primitives and trained with the compile-anywhere
workflow: ``LogisticRegression``, ``PolynomialRegression``, ``LinearSVM``, ``KernelizedSVM`` with the
kernels ``RBFKernel`` and ``PolynomialKernel``. Parameters follow scikit-learn where it has the model
(``coef_`` is ``weight``, ``intercept_`` is ``bias``), so fitted scikit-learn models load.

Example:
    >>> from mithril.models import KernelizedSVM, RBFKernel
    >>> KernelizedSVM(RBFKernel(gamma=0.5)).input_keys
    ['input1', 'input2', 'weight', 'bias']
    >>> RBFKernel().input_keys  # Mithril's form: length scale and width are parameters
    ['input1', 'input2', 'l_scale', 'sigma']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import validation
from ...deprecation import warn_deprecated
from ...errors import ArgumentError
from ...framework.keys import TBD, IOKey
from ...framework.model import Model
from ...lazy_numpy import np
from ._util import op, param, set_given
from .linear import Linear
from .robust import robust_power
from .tensor_ops import DistanceMatrix, PolynomialFeatures

__all__ = ["KernelizedSVM", "LinearSVM", "LogisticRegression", "PolynomialKernel", "PolynomialRegression", "RBFKernel"]


class _LinearClassifier(Model):
    """``output = input @ weight.T + bias`` (``[N, 1]``) and a second output computed from it: a subclass names
    it (``_second``) and computes it (``_from_output``)."""

    _second = ""

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        linear = Linear(1)
        self |= linear(input=IOKey("input"), weight="weight", bias="bias")
        self.expose(self._from_output(linear.output), self._second, canonical=False)
        self.expose(linear.output, "output")
        self._cin = self._keys["input"]

    def _from_output(self, output: Any) -> Any:
        raise NotImplementedError


class LogisticRegression(_LinearClassifier):
    """``output = input @ weight.T + bias`` (the logits, ``[N, 1]``) and ``probs_output = sigmoid(output)``;
    train ``output`` with ``BinaryCrossEntropy()`` (logits). ``weight`` ``[1, d]`` is scikit-learn's
    ``coef_``, ``bias`` its ``intercept_``.

    >>> LogisticRegression().output_keys
    ['probs_output', 'output']
    """

    _second = "probs_output"

    def _from_output(self, output: Any) -> Any:
        return op(self, "sigmoid", output)


class PolynomialRegression(Model):
    """Linear regression on ``PolynomialFeatures(degree)`` of ``input`` ``[N, in_features]``:
    ``output = features @ weight.T + bias`` ``[N, dimension]``, ``weight`` ``[dimension, K]``. As in Mithril,
    ``dimension=None`` (the default) infers the output width from ``weight``/``bias`` or what ``output`` is
    connected to (a target ``[N, 2]``, say); ``in_features`` fixes the input width at construction.

    >>> PolynomialRegression(degree=2, dimension=1, in_features=1).input_keys
    ['input', 'weight', 'bias']
    """

    def __init__(
        self, degree: int, dimension: int | None = None, input: Any = TBD, weight: Any = TBD, bias: Any = TBD,
        *, in_features: int | None = None, name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        features = PolynomialFeatures(degree, in_features)
        self |= features(input=IOKey("input"))
        self |= Linear(dimension)(input=features.output, weight="weight", bias="bias", output=IOKey("output"))
        set_given(self, input=input, weight=weight, bias=bias)
        self._cin = self._keys["input"]


class LinearSVM(_LinearClassifier):
    """A linear support-vector machine: ``output = input @ weight.T + bias`` (the decision function,
    ``[N, 1]``) and ``decision_output`` its sign in {-1, +1}; train ``output`` with ``HingeLoss()`` (targets
    in {-1, +1}) plus ``L2`` on ``weight``.

    >>> LinearSVM().output_keys
    ['decision_output', 'output']
    """

    _second = "decision_output"

    def _from_output(self, output: Any) -> Any:
        return op(self, "where", op(self, "less", output, 0.0), -1.0, 1.0)


def _input_or_constant(name: str, value: Any, **hints: Any) -> Any:
    """The key ``name`` (an input, a trainable parameter unless connected) or, given a value, that constant."""
    if value is TBD:
        return IOKey(name, **hints)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = float(value)
    return IOKey(name, value=np.asarray(value, dtype=float) if not isinstance(value, float) else value)


class _Kernel(Model):
    """``output[i, j] = k(input1[i], input2[j])`` for rows ``input1`` ``[N, d]`` and ``input2`` ``[M, d]``
    (Mithril's key names; ``left``/``right`` are deprecated aliases)."""

    _deprecated_aliases: Mapping[str, str] = {"left": "input1", "right": "input2"}

    def _pair(self) -> tuple[IOKey, IOKey]:
        self._declare_keys("input1", "input2")
        return IOKey("input1", shape=["N", "d"]), IOKey("input2", shape=["M", "d"])

    def _done(self, result: Any) -> None:
        self.expose(result, "output")
        self._cin = self._keys["input1"]


class RBFKernel(_Kernel):
    """Mithril's RBF kernel ``l_scale**2 * exp(-|input1_i - input2_j|**2 / (2 * sigma**2))``: keys ``input1``
    ``[N, d]``, ``input2`` ``[M, d]``, ``l_scale`` ``[1]``, ``sigma`` ``[1]`` (trainable unless given a value
    here or connected), ``output`` ``[N, M]``.

    ``gamma=`` is scikit-learn's form, ``rbf_kernel(gamma)`` = ``exp(-gamma * |.|**2)``: ``l_scale = 1`` and
    ``sigma = 1 / sqrt(2 * gamma)``, both constants (then not keys).

    >>> RBFKernel().input_keys
    ['input1', 'input2', 'l_scale', 'sigma']
    >>> RBFKernel(gamma=0.1).input_keys
    ['input1', 'input2']
    """

    def __init__(
        self, input1: Any = TBD, input2: Any = TBD, l_scale: Any = TBD, sigma: Any = TBD, *,
        gamma: float | None = None, name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        left, right = self._pair()
        distances = DistanceMatrix(norm=2.0)  # squared Euclidean distances
        self |= distances(left=left, right=right)
        if gamma is not None:
            gamma = validation.number("RBFKernel", "gamma", gamma, low=0.0)
            if l_scale is not TBD or sigma is not TBD:
                raise ArgumentError(
                    "RBFKernel: give gamma= (scikit-learn's form) or l_scale=/sigma= (Mithril's), not both"
                )
            self.__dict__["gamma"] = gamma
            self._done(op(self, "exp", op(self, "multiply", distances.output, -gamma)))
        else:
            self._declare_keys(*(key for key, value in (("l_scale", l_scale), ("sigma", sigma)) if value is TBD))
            scale = _input_or_constant("l_scale", l_scale, shape=[1], type="float", differentiable=True, init="ones")
            width = _input_or_constant("sigma", sigma, shape=[1], type="float", differentiable=True, init="ones")
            exponent = op(self, "divide", op(self, "multiply", distances.output, -0.5), op(self, "square", width))
            self._done(op(self, "multiply", op(self, "square", scale), op(self, "exp", exponent)))
        set_given(self, input1=input1, input2=input2)


class PolynomialKernel(_Kernel):
    """Mithril's polynomial kernel ``(input1 @ input2.T + poly_coef) ** degree``: keys ``input1`` ``[N, d]``,
    ``input2`` ``[M, d]``, ``poly_coef`` and ``degree`` (one number each, ``[]``, or ``[1]`` as Mithril's tests
    give them; inputs unless given a value here) and ``output`` ``[N, M]``. ``robust=True`` (Mithril's default)
    takes the power as ``Power(robust=True)`` does.

    ``gamma=`` scales the dot products first (scikit-learn's ``polynomial_kernel(degree, gamma, coef0)``; with it
    the power is exact unless ``robust=True`` is given). ``coef0=`` is a deprecated alias of ``poly_coef``, and
    a positional degree (``PolynomialKernel(2)``) is deprecated: write ``PolynomialKernel(degree=2)``.

    >>> PolynomialKernel().input_keys
    ['input1', 'input2', 'poly_coef', 'degree']
    >>> PolynomialKernel(degree=2, poly_coef=1.0, gamma=0.5).input_keys  # given values: constant keys
    ['input1', 'input2', 'poly_coef', 'degree']
    """

    def __init__(
        self,
        robust: bool | None = None,
        input1: Any = TBD,
        input2: Any = TBD,
        poly_coef: Any = TBD,
        degree: Any = TBD,
        *,
        gamma: float | None = None,
        coef0: float | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        if isinstance(robust, int) and not isinstance(
            robust, bool
        ):  # our earlier PolynomialKernel(degree, gamma, coef0)
            warn_deprecated(f"PolynomialKernel({robust}) (a positional degree)", f"PolynomialKernel(degree={robust})")
            degree, robust = robust, False
            gamma = 1.0 if gamma is None else gamma
            poly_coef = 1.0 if coef0 is None and poly_coef is TBD else poly_coef
        if coef0 is not None:
            warn_deprecated("PolynomialKernel(coef0=)", "poly_coef=")
            if poly_coef is not TBD:
                raise ArgumentError("PolynomialKernel: coef0= is a deprecated alias of poly_coef=; give one of them")
            poly_coef = coef0
        if robust is None:
            robust = gamma is None
        robust = validation.boolean("PolynomialKernel", "robust", robust)
        if degree is not TBD and isinstance(degree, (int, float)) and not isinstance(degree, bool):
            degree = (
                validation.positive_int("PolynomialKernel", "degree", degree) if float(degree).is_integer() else degree
            )
        self.__dict__.update(robust=robust, gamma=gamma)
        left, right = self._pair()
        dots = op(self, "matmul", left, op(self, "swapaxes", right))  # swapaxes: torch.compile mis-traces transpose
        if gamma is not None:
            dots = op(self, "multiply", dots, validation.number("PolynomialKernel", "gamma", gamma))
        base = op(self, "add", dots, _input_or_constant("poly_coef", poly_coef, type="float"))
        exponent = _input_or_constant("degree", degree, type="float")
        self._done(robust_power(self, base, exponent) if robust else op(self, "power", base, exponent))
        self.set_shapes(input1=["N", "d"], input2=["M", "d"], output=["N", "M"])
        set_given(self, input1=input1, input2=input2)


class KernelizedSVM(Model):
    """A kernel machine: ``output = kernel @ weight.T + bias`` (``[N, 1]``, the decision function) with
    ``kernel = kernel_model(input1, input2)`` ``[N, M]`` (an output too, as in Mithril: a regulariser such as
    ``QuadraticFormRegularizer`` reads it, ``discard_keys=["kernel"]`` drops it) for samples ``input1``
    ``[N, d]`` and support vectors ``input2`` ``[M, d]`` (Mithril's key names; ``input``/``support_vectors``
    are deprecated aliases). ``weight`` ``[1, M]`` is scikit-learn's ``SVC.dual_coef_``, ``input2`` its
    ``support_vectors_`` and ``bias`` ``[1]`` its ``intercept_``; the kernel's other inputs (``l_scale``,
    ``sigma``, ``poly_coef``, ``degree``) are keys of the machine, and any key may be given a value here
    (``KernelizedSVM(RBFKernel(), sigma=[0.5])``).

    >>> KernelizedSVM(PolynomialKernel(degree=2, poly_coef=1.0)).output_keys
    ['kernel', 'output']
    >>> KernelizedSVM(RBFKernel(gamma=0.5)).input_keys
    ['input1', 'input2', 'weight', 'bias']
    """

    _deprecated_aliases: Mapping[str, str] = {"input": "input1", "support_vectors": "input2"}

    def __init__(
        self, kernel: Model, weight: Any = TBD, bias: Any = TBD, *, name: str | None = None, **values: Any
    ) -> None:
        super().__init__(name=name)
        if not isinstance(kernel, _Kernel):
            raise ArgumentError(
                f"KernelizedSVM: kernel must be RBFKernel(...) or PolynomialKernel(...), got {kernel!r}"
            )
        unknown = sorted(set(values) - set(kernel.input_keys))
        if unknown:
            raise ArgumentError(
                f"KernelizedSVM: {unknown} are not keys of the kernel; its keys are {kernel.input_keys}"
            )
        self._declare_keys("input1", "input2")
        extra = {key: IOKey(key) for key in kernel.input_keys if key not in ("input1", "input2")}  # l_scale, sigma...
        self |= kernel(input1=IOKey("input1"), input2=IOKey("input2"), **extra)
        self.expose(kernel.output, "kernel", canonical=False)
        weight_key, bias_key = param("weight", shape=[1, "S"]), param("bias", shape=[1])
        self |= Linear(1)(input=kernel.output, weight=weight_key, bias=bias_key, output=IOKey("output"))
        self.set_shapes(input1=["N", "d"], input2=["S", "d"], weight=[1, "S"], kernel=["N", "S"], output=["N", 1])
        set_given(self, weight=weight, bias=bias, **values)
        self._cin = self._keys["input1"]
