"""Embeddings learnt with the compile-anywhere workflow: ``MDS`` and ``TSNE`` are logical models whose
trainable input ``coords`` ``[N, prediction_dim]`` is the embedding and whose output is the loss to
minimise (the stress of metric MDS, the KL divergence of t-SNE), so any backend's gradients train them.
``tsne_joint_probabilities`` computes t-SNE's perplexity-calibrated affinities ``p_joint`` from the data
with NumPy (a binary search per row, done once before training: the *prepare* step).

Example:
    >>> from mithril.models import MDS, TSNE
    >>> MDS(prediction_dim=2).input_keys, TSNE(prediction_dim=2).input_keys
    (['input', 'coords'], ['p_joint', 'coords'])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import validation
from ...framework.keys import IOKey
from ...framework.model import Model
from ._util import op, param
from .margin_losses import KLDivergence
from .tensor_ops import DistanceMatrix, _identity_mask

__all__ = ["MDS", "TSNE", "tsne_joint_probabilities"]

_INPUT_TYPES = ("distances", "points")


def _squared_distances(model: Model, points: Any) -> Any:
    """``|points_i - points_j|^2`` ``[N, N]`` of the rows of ``points``."""
    distances = DistanceMatrix(squared=True)
    model |= distances(left=points, right=points)
    return distances.output


def _distances(model: Model, points: Any) -> Any:
    """Pairwise Euclidean distances of the rows of ``points``; the zero diagonal is masked before the
    square root, so the gradient stays finite (``sqrt`` has an infinite slope at 0)."""
    squared = _squared_distances(model, points)
    diagonal = _identity_mask(model, op(model, "positions", squared, axis=0), op(model, "positions", squared, axis=1))
    return op(model, "where", diagonal, 0.0, op(model, "sqrt", op(model, "where", diagonal, 1.0, squared)))


def _coords(prediction_dim: int) -> IOKey:
    return param("coords", init="normal", shape=["N", prediction_dim])


class MDS(Model):
    """Metric multidimensional scaling: ``output`` is the raw stress of the embedding ``coords``
    ``[N, prediction_dim]`` (trainable), ``sum_{i<j} (|coords_i - coords_j| - input_ij)^2``, which is
    scikit-learn's ``MDS(metric_mds=True).stress_``. ``input`` is the dissimilarity matrix ``[N, N]``
    (``input_type="distances"``) or the data ``[N, d]`` whose Euclidean distances are the dissimilarities
    (``input_type="points"``). Minimise ``output`` over ``coords`` (e.g. ``TrainModel`` + gradient steps).

    >>> MDS(prediction_dim=2, input_type="points").output_keys
    ['output']
    """

    def __init__(self, prediction_dim: int, input_type: str = "distances", *, name: str | None = None) -> None:
        super().__init__(name=name)
        self.__dict__["prediction_dim"] = validation.positive_int("MDS", "prediction_dim", prediction_dim)
        self.__dict__["input_type"] = validation.choice("MDS", "input_type", input_type, _INPUT_TYPES)
        self._declare_keys("input")
        if input_type == "points":
            target = _distances(self, IOKey("input", shape=["N", "d"]))
        else:
            target = IOKey("input", shape=["N", "N"])
        residual = op(self, "subtract", _distances(self, _coords(prediction_dim)), target)
        self.expose(op(self, "multiply", op(self, "sum", op(self, "square", residual)), 0.5), "output")
        self._cin = self._keys["input"]


class TSNE(Model):
    """t-SNE's objective: ``output`` is ``KL(p_joint || Q)`` of the embedding ``coords``
    ``[N, prediction_dim]`` (trainable), where ``Q_ij`` is proportional to the Student-t kernel
    ``(1 + |coords_i - coords_j|^2 / a)^(-(a + 1) / 2)`` with ``a = max(prediction_dim - 1, 1)`` degrees of
    freedom (scikit-learn's choice; ``Q_ii = 0``), normalised over all pairs. ``p_joint`` ``[N, N]`` are the
    symmetric affinities of the data: compute them once with :meth:`prepare` (or
    :func:`tsne_joint_probabilities`) and feed them as data; multiply them by the early exaggeration for
    the first steps as scikit-learn does. On scikit-learn's embedding ``output`` equals its
    ``TSNE(method="exact").kl_divergence_``.

    >>> model = TSNE(prediction_dim=2, perplexity=5.0)
    >>> import numpy as np
    >>> model.prepare(np.random.default_rng(0).normal(size=(20, 3)))["p_joint"].shape
    (20, 20)
    """

    def __init__(self, prediction_dim: int, perplexity: float = 30.0, input_type: str = "points", *, name: str | None = None) -> None:
        super().__init__(name=name)
        self.__dict__["prediction_dim"] = validation.positive_int("TSNE", "prediction_dim", prediction_dim)
        self.__dict__["perplexity"] = validation.number("TSNE", "perplexity", perplexity, low=1.0)
        self.__dict__["input_type"] = validation.choice("TSNE", "input_type", input_type, _INPUT_TYPES)
        self._declare_keys("p_joint")
        dof = float(max(prediction_dim - 1, 1))
        scaled = op(self, "divide", _squared_distances(self, _coords(prediction_dim)), dof)
        kernel = op(self, "power", op(self, "add", scaled, 1.0), -(dof + 1.0) / 2.0)
        off_diagonal = _identity_mask(self, op(self, "positions", kernel, axis=0), op(self, "positions", kernel, axis=1))
        kernel = op(self, "where", off_diagonal, 0.0, kernel)
        q = op(self, "divide", kernel, op(self, "sum", kernel))
        kl = KLDivergence(reduction="sum")
        self |= kl(input=q, target=IOKey("p_joint", shape=["N", "N"]), output=IOKey("output"))
        self._cin = self._keys["p_joint"]

    def prepare(self, data: Any) -> dict[str, np.ndarray]:
        """The data inputs for ``pm.evaluate``: ``{"p_joint": tsne_joint_probabilities(data, perplexity,
        input_type)}`` for the points ``[N, d]`` (or distance matrix ``[N, N]``) ``data``."""
        return {"p_joint": tsne_joint_probabilities(data, self.perplexity, self.input_type)}


def tsne_joint_probabilities(data: Any, perplexity: float = 30.0, input_type: str = "points", *, tol: float = 1e-5, max_steps: int = 100) -> np.ndarray:
    """t-SNE's symmetric affinities ``P`` ``[N, N]`` (zero diagonal, sum 1) of the rows of ``data``
    ``[N, d]`` (``input_type="points"``, Euclidean distances) or of a distance matrix ``[N, N]``
    (``"distances"``). Each row's conditional distribution ``p_{j|i} ~ exp(-beta_i |x_i - x_j|^2)`` has its
    precision ``beta_i`` found by bisection so that its entropy is ``log(perplexity)`` (nats, to ``tol``);
    then ``P = (p_{j|i} + p_{i|j}) / sum``.

    >>> p = tsne_joint_probabilities(np.arange(12.0).reshape(6, 2), perplexity=2.0)
    >>> round(float(p.sum()), 6), float(p[0, 0])
    (1.0, 0.0)
    """
    validation.choice("tsne_joint_probabilities", "input_type", input_type, _INPUT_TYPES)
    x = np.asarray(data, dtype=np.float64)
    if input_type == "points":
        sq = np.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=-1)
    else:
        if x.ndim != 2 or x.shape[0] != x.shape[1]:
            raise validation.fail("tsne_joint_probabilities", "data", "a square [N, N] distance matrix", f"shape {x.shape}")
        sq = x**2
    n = sq.shape[0]
    if not 1.0 <= perplexity < n:
        raise validation.fail("tsne_joint_probabilities", "perplexity", f"a number in [1, N={n})", perplexity)
    target = np.log(perplexity)
    off = ~np.eye(n, dtype=bool)
    conditional = np.zeros((n, n))
    for i in range(n):
        d = sq[i, off[i]]
        low, high, beta = 0.0, np.inf, 1.0
        for _ in range(max_steps):
            w = np.exp(-(d - d.min()) * beta)  # shifted: the entropy is unchanged, no underflow
            p = w / w.sum()
            entropy = -np.sum(p * np.log(np.maximum(p, 1e-300)))
            if abs(entropy - target) <= tol:
                break
            if entropy > target:  # too flat: sharpen
                low, beta = beta, beta * 2.0 if high == np.inf else (beta + high) / 2.0
            else:
                high, beta = beta, (beta + low) / 2.0
        conditional[i, off[i]] = p
    joint = conditional + conditional.T
    return joint / joint.sum()
