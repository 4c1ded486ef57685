"""Mithril's manifold-learning models: the losses ``MDSCore`` (normalised stress of metric MDS) and
``TSNECore`` (t-SNE's KL divergence) between a distance matrix and predicted distances, and
``DistanceEncoder`` with its two forms ``MDS`` and ``TSNE``, whose trainable input ``coords``
``[N, prediction_dim]`` is the embedding and whose ``output`` is the loss to minimise over it, so any
backend's gradients train them (``TrainModel`` + gradient steps).

Distances are Mithril's: ``EncoderDistanceMatrix(get_final_distance=False)`` of the rows, the sums
``sum_k |x_ik - x_jk| ** p`` whose order ``p`` is the input ``norm`` mapped into ``[1, 5]`` by
``NormModifier`` (``norm=2``: squared Euclidean distances).

t-SNE's affinities ``p_joint`` are data: :func:`tsne_joint_probabilities` (or :meth:`TSNE.prepare`)
computes them once with NumPy before training (Mithril's ``calculate_p_joint=True`` computes them in
the graph, which is not available here).

Example:
    >>> from mithril.models import MDS, TSNE
    >>> MDS(prediction_dim=2).input_keys, MDS(prediction_dim=2).output_keys
    (['input', 'coords', 'norm'], ['output', 'predicted_coords'])
    >>> TSNE(prediction_dim=2, input_type="points").input_keys
    ['input', 'coords', 'norm', 'p_joint']
"""

from __future__ import annotations

from typing import Any, ClassVar

from ... import validation
from ...deprecation import warn_deprecated
from ...errors import ArgumentError
from ...framework.keys import TBD, IOKey
from ...framework.model import Model
from ...lazy_numpy import np
from ._util import op, param, set_given
from .margin_losses import KLDivergence
from .robust import robust_power
from .tensor_ops import EncoderDistanceMatrix, NormModifier, StableReciprocal, _identity_mask

__all__ = ["MDS", "TSNE", "DistanceEncoder", "MDSCore", "TSNECore", "tsne_joint_probabilities"]

_INPUT_TYPES = ("distances", "powered_distances", "points")


def _power(model: Model, base: Any, exponent: Any, robust: bool) -> Any:
    """``Power(robust=robust)`` of Mithril: the robust one never gives NaN and has finite gradients at 0."""
    return robust_power(model, base, exponent) if robust else op(model, "power", base, exponent)


def _reciprocal(model: Model, value: Any) -> Any:
    """``StableReciprocal()`` of ``value``: finite at 0."""
    block = StableReciprocal()
    model |= block(input=value)
    return block.output


class _DistanceLoss(Model):
    """What :class:`DistanceEncoder` takes as its ``base_model``: a loss between ``distances`` and
    ``pred_distances``."""

    requires_norm: ClassVar[bool]
    """Whether ``DistanceEncoder`` connects its ``norm`` to this model's."""
    exact_distances: bool


class MDSCore(_DistanceLoss):
    """Mithril's ``MDSCore``: the normalised stress between ``distances`` ``[N, N]`` and ``pred_distances``
    ``[N, N]`` of order ``p = NormModifier(norm)`` (``norm`` one number; ``p = 2`` gives Kruskal's stress-1,
    scikit-learn's ``normalized_stress``):

    ``output = (sum |D - P ** (1 / p)| ** p / sum D ** p) ** (1 / p)``

    with ``exact_distances=True`` (``distances`` are the distances ``D``), or, with
    ``exact_distances=False`` (``distances`` are ``D ** p``, powered as ``DistanceMatrix`` gives them),
    ``(sum |distances ** (1 / p) - P ** (1 / p)| ** p / sum distances) ** (1 / p)``. ``pred_distances``
    ``P`` are always powered. ``robust`` takes the powers as ``Power(robust=True)`` does; the divisions are
    ``StableReciprocal``'s.

    >>> MDSCore().input_keys
    ['distances', 'pred_distances', 'norm']
    """

    requires_norm = True
    robust: bool

    def __init__(
        self, exact_distances: bool = True, robust: bool = True, distances: Any = TBD, pred_distances: Any = TBD,
        norm: Any = TBD, *, name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        exact = validation.boolean("MDSCore", "exact_distances", exact_distances)
        robust = validation.boolean("MDSCore", "robust", robust)
        self.__dict__.update(exact_distances=exact, robust=robust)
        self._declare_keys("distances", "pred_distances", "norm")
        order_block = NormModifier()
        self |= order_block(input=IOKey("norm", shape=[]))
        order = order_block.output
        root = _reciprocal(self, order)
        distances_key, predicted = IOKey("distances"), _power(self, IOKey("pred_distances"), root, robust)
        if exact:
            difference = op(self, "subtract", distances_key, predicted)
            scale = op(self, "sum", _power(self, distances_key, order, robust))
        else:
            difference = op(self, "subtract", _power(self, distances_key, root, robust), predicted)
            scale = op(self, "sum", distances_key)
        error = op(self, "sum", _power(self, op(self, "abs", difference), order, robust))
        ratio = op(self, "multiply", error, _reciprocal(self, scale))
        self.expose(_power(self, ratio, root, robust), "output")
        self.set_shapes(distances=["N", "N"], pred_distances=["N", "N"])
        set_given(self, distances=distances, pred_distances=pred_distances, norm=norm)
        self._cin = self._keys["distances"]


class TSNECore(_DistanceLoss):
    """Mithril's ``TSNECore``: t-SNE's objective ``output = sum P * (log P - log Q)`` (``KL(P || Q)``,
    ``KLDivergence`` summed) of the affinities ``p_joint`` ``P`` ``[N, N]`` and the Student-t similarities
    of the predicted squared distances ``pred_distances`` ``[N, N]``: ``Q_ij ~ 1 / (1 + pred_ij)`` off the
    diagonal, normalised over all pairs (``Q_ii = 0``). ``distances`` ``[N, N]`` give ``N``.
    ``exact_distances`` says whether ``distances`` are distances or squared ones (they would be squared for
    the affinities computed in the graph, ``calculate_p_joint=True``, which is not available: compute
    ``p_joint`` with :func:`tsne_joint_probabilities` and feed it). On scikit-learn's 2-D embedding
    ``output`` is its ``TSNE(method="exact").kl_divergence_``.

    >>> TSNECore().input_keys
    ['distances', 'pred_distances', 'p_joint']
    """

    requires_norm = False
    perplexity: float

    def __init__(
        self, exact_distances: bool = True, calculate_p_joint: bool = False, perplexity: float = 20.0,
        distances: Any = TBD, pred_distances: Any = TBD, p_joint: Any = TBD, *, name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        exact = validation.boolean("TSNECore", "exact_distances", exact_distances)
        if validation.boolean("TSNECore", "calculate_p_joint", calculate_p_joint):
            raise ArgumentError(
                "TSNECore(calculate_p_joint=True): computing the affinities in the graph (Mithril's TsnePJoint) is "
                "not available; compute p_joint once with mithril.models.tsne_joint_probabilities (or TSNE.prepare) "
                "and give it as data"
            )
        self.__dict__.update(
            exact_distances=exact, perplexity=validation.number("TSNECore", "perplexity", perplexity, low=1.0)
        )
        self._declare_keys("distances", "pred_distances", "p_joint")
        reference = IOKey("distances")
        rows = op(self, "positions", reference, axis=0)
        diagonal = _identity_mask(self, rows, op(self, "positions", IOKey("distances"), axis=0))
        similarity = op(self, "power", op(self, "add", IOKey("pred_distances"), 1.0), -1.0)
        similarity = op(self, "where", diagonal, 0.0, similarity)
        q = op(self, "divide", similarity, op(self, "sum", similarity))
        kl = KLDivergence(reduction="sum")
        self |= kl(input=q, target=IOKey("p_joint"), output=IOKey("output"))
        self.set_shapes(distances=["N", "N"], pred_distances=["N", "N"], p_joint=["N", "N"])
        set_given(self, distances=distances, pred_distances=pred_distances, p_joint=p_joint)
        self._cin = self._keys["distances"]


class DistanceEncoder(Model):
    """Mithril's ``DistanceEncoder``: fits an embedding ``coords`` ``[N, d]`` (trainable) to data ``input``
    by the loss ``base_model`` (an ``MDSCore`` or ``TSNECore``) between the data's distances and the
    embedding's, both of order ``NormModifier(norm)`` (one number). ``input_type`` says what ``input`` is:
    ``"distances"`` ``[N, N]`` (``distances`` of the base model as given), ``"powered_distances"`` (already
    raised to the order) or ``"points"`` ``[N, d_in]`` (their distances are computed). Keys ``input``,
    ``coords``, ``norm``, the base model's other inputs (``p_joint``), outputs ``predicted_coords`` (the
    embedding) and ``output`` (the loss).

    >>> DistanceEncoder(MDSCore(exact_distances=False), input_type="points").input_keys
    ['input', 'coords', 'norm']
    """

    base_model: MDSCore | TSNECore
    input_type: str

    def __init__(
        self, base_model: MDSCore | TSNECore, input_type: str = "distances", input: Any = TBD, coords: Any = TBD,
        norm: Any = TBD, *, name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        owner = type(self).__name__
        if not isinstance(base_model, (MDSCore, TSNECore)):
            raise ArgumentError(f"{owner}: base_model must be MDSCore(...) or TSNECore(...), got {base_model!r}")
        input_type = validation.choice(owner, "input_type", input_type, _INPUT_TYPES)
        self.__dict__.update(base_model=base_model, input_type=input_type)
        self._declare_keys("input", "coords", "norm")
        scalar_norm = IOKey("norm", shape=[])
        embedding = EncoderDistanceMatrix(get_final_distance=False)
        self |= embedding(input1=param("coords", init="normal"), input2=IOKey("coords"), norm=scalar_norm)
        if input_type == "points":
            data = EncoderDistanceMatrix(get_final_distance=False)
            self |= data(input1=IOKey("input"), input2=IOKey("input"), norm=IOKey("norm"))
            distances: Any = data.output
        else:
            distances = IOKey("input")
        connections: dict[str, Any] = {
            "distances": distances,
            "pred_distances": embedding.output,
            "output": IOKey("output"),
        }
        if base_model.requires_norm:
            connections["norm"] = IOKey("norm")
        for key in base_model.input_keys:  # p_joint: a key of the encoder under its own name
            connections.setdefault(key, IOKey(key))
        self |= base_model(**connections)
        from ..api_compat import Buffer  # here, not at the top: api_compat imports this package

        self |= Buffer()(input=IOKey("coords"), output=IOKey("predicted_coords"))
        set_given(self, input=input, coords=coords, norm=norm)
        self._cout = self._keys["output"]
        self._cin = self._keys["input"]


class MDS(DistanceEncoder):
    """Mithril's ``MDS``: metric multidimensional scaling as ``DistanceEncoder(MDSCore(exact_distances=
    input_type == "distances"), input_type)``. ``output`` is the normalised stress of the embedding
    ``coords`` ``[N, prediction_dim]`` (trainable); with ``norm=2`` it is Kruskal's stress-1,
    ``sqrt(sum (|coords_i - coords_j| - D_ij) ** 2 / sum D_ij ** 2)``, scikit-learn's ``normalized_stress``
    (``stress_ = output ** 2 * sum D ** 2 / 4``; minimising either gives the same embedding).

    >>> MDS(prediction_dim=2, input_type="points").output_keys
    ['output', 'predicted_coords']
    """

    prediction_dim: int

    def __init__(
        self, prediction_dim: int, input_type: str = "distances", input: Any = TBD, coords: Any = TBD,
        norm: Any = TBD, *, name: str | None = None,
    ) -> None:
        prediction_dim = validation.positive_int("MDS", "prediction_dim", prediction_dim)
        input_type = validation.choice("MDS", "input_type", input_type, _INPUT_TYPES)
        core = MDSCore(exact_distances=input_type == "distances")
        super().__init__(core, input_type, input, coords, norm, name=name)
        self.__dict__["prediction_dim"] = prediction_dim
        self.set_shapes(coords=[None, prediction_dim])


class TSNE(DistanceEncoder):
    """Mithril's ``TSNE``: t-SNE as ``DistanceEncoder(TSNECore(...), input_type)``. ``output`` is
    ``KL(p_joint || Q)`` of the embedding ``coords`` ``[N, prediction_dim]`` (trainable), ``Q`` the Student-t
    similarities of its squared distances (``norm=2``). ``p_joint`` ``[N, N]`` are the data's affinities:
    compute them once with :meth:`prepare` (or :func:`tsne_joint_probabilities`) and feed them; multiply
    them by the early exaggeration for the first steps as scikit-learn does. ``preplexity`` is Mithril's
    spelling (``perplexity=`` is deprecated); it is what :meth:`prepare` uses.

    >>> import numpy as np
    >>> model = TSNE(prediction_dim=2, input_type="points", preplexity=5.0)
    >>> model.prepare(np.random.default_rng(0).normal(size=(20, 3)))["p_joint"].shape
    (20, 20)
    """

    prediction_dim: int
    preplexity: float

    def __init__(
        self,
        prediction_dim: int,
        input_type: str = "distances",
        preplexity: float = 20.0,
        calculate_p_joint: bool = False,
        input: Any = TBD,
        norm: Any = TBD,
        *,
        perplexity: float | None = None,
        name: str | None = None,
    ) -> None:
        if perplexity is not None:
            warn_deprecated("TSNE(perplexity=)", "TSNE(preplexity=)")
            preplexity = perplexity
        prediction_dim = validation.positive_int("TSNE", "prediction_dim", prediction_dim)
        input_type = validation.choice("TSNE", "input_type", input_type, _INPUT_TYPES)
        core = TSNECore(
            exact_distances=input_type == "distances", calculate_p_joint=calculate_p_joint, perplexity=preplexity
        )
        super().__init__(core, input_type, input, TBD, norm, name=name)
        self.__dict__.update(prediction_dim=prediction_dim, preplexity=core.perplexity)
        self.set_shapes(coords=[None, prediction_dim])

    @property
    def perplexity(self) -> float:
        """The target perplexity of :meth:`prepare` (Mithril spells the argument ``preplexity``)."""
        return float(self.preplexity)

    def prepare(self, data: Any) -> dict[str, np.ndarray]:
        """The data inputs for ``pm.evaluate`` besides ``input``/``norm``: ``{"p_joint":
        tsne_joint_probabilities(data, preplexity, input_type)}`` for this model's kind of ``data``: points
        ``[N, d]``, distances ``[N, N]`` or squared distances (``"powered_distances"`` with ``norm=2``)."""
        return {"p_joint": tsne_joint_probabilities(data, self.perplexity, self.input_type)}


def tsne_joint_probabilities(
    data: Any, perplexity: float = 30.0, input_type: str = "points", *, tol: float = 1e-5, max_steps: int = 100
) -> np.ndarray:
    """t-SNE's symmetric affinities ``P`` ``[N, N]`` (zero diagonal, sum 1) of the rows of ``data``
    ``[N, d]`` (``input_type="points"``, Euclidean distances), of a distance matrix ``[N, N]``
    (``"distances"``) or of squared distances (``"powered_distances"``). Each row's conditional
    distribution ``p_{j|i} ~ exp(-beta_i |x_i - x_j|^2)`` has its precision ``beta_i`` found by bisection
    so that its entropy is ``log(perplexity)`` (nats, to ``tol``); then ``P = (p_{j|i} + p_{i|j}) / sum``.

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
            raise validation.fail(
                "tsne_joint_probabilities", "data", "a square [N, N] distance matrix", f"shape {x.shape}"
            )
        sq = x**2 if input_type == "distances" else x
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
    result: np.ndarray = joint / joint.sum()
    return result
