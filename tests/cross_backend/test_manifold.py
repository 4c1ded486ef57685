"""Issue 16: Mithril's MDS and TSNE against scikit-learn on small generated data. With ``norm=2`` their losses
are scikit-learn's normalised stress (Kruskal's stress-1, from its ``stress_``) and ``kl_divergence_`` on
scikit-learn's own embeddings on every installed backend (gradients against PyTorch autograd), t-SNE's
affinities equal scikit-learn's, and embeddings trained with the compile-anywhere workflow (ml.compile +
evaluate + gradient steps) are as good as scikit-learn's."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
import torch
from mithril.models import MDS, TSNE, IOKey, Model, tsne_joint_probabilities
from mithril.plugins.lookup import backend_class
from mithril_testing.blocks import DTYPES, backends, evaluate_model, tolerance
from sklearn.datasets import make_blobs
from sklearn.manifold import MDS as SkMDS
from sklearn.manifold import TSNE as SkTSNE
from sklearn.manifold import trustworthiness
from sklearn.manifold._t_sne import _joint_probabilities
from sklearn.metrics import pairwise_distances

X, LABELS = make_blobs(n_samples=40, n_features=5, centers=3, random_state=0)
PERPLEXITY = 10.0
N = len(X)
NORM = np.array(2.0)  # Mithril's norm: the order of the distances (NormModifier(2) = 2)
SUM_SQUARED = float((pairwise_distances(X) ** 2).sum())  # sum of D_ij ** 2 over the full matrix


def _normalized(stress: float) -> float:
    """scikit-learn's stress-1 from its raw ``stress_`` (half the full-matrix sum of squared residuals)."""
    return float(np.sqrt(stress / (SUM_SQUARED / 2)))


@pytest.fixture(scope="module")
def sk_mds() -> SkMDS:
    return SkMDS(2, n_init=1, init="random", random_state=0).fit(X)


@pytest.fixture(scope="module")
def sk_tsne() -> SkTSNE:
    return SkTSNE(2, perplexity=PERPLEXITY, method="exact", init="pca", random_state=0).fit(X)


def _wrap(block: Model, *keys: str) -> Model:
    model = Model()
    model |= block(**{k: k for k in keys}, output=IOKey("output"))
    return model


def _torch_losses(coords: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reference stress-1 and KL(P||Q) of ``coords`` in PyTorch (autograd), from their textbook formulas."""
    c = torch.tensor(coords, requires_grad=True)
    d = torch.cdist(c, c)
    stress = (((d - torch.tensor(pairwise_distances(X))) ** 2).sum() / SUM_SQUARED).sqrt()
    kernel = (1 + d**2) ** -1 * (1 - torch.eye(N, dtype=c.dtype))
    q = kernel / kernel.sum()
    p = torch.tensor(tsne_joint_probabilities(X, PERPLEXITY))
    kl = (p * (torch.log(p.clamp_min(1e-12)) - torch.log(q.clamp_min(1e-12)))).sum()
    return c, stress, kl


def test_tsne_joint_probabilities_match_scikit_learn() -> None:
    ours = tsne_joint_probabilities(X, PERPLEXITY)
    reference = np.zeros((N, N))
    reference[np.triu_indices(N, 1)] = _joint_probabilities(
        pairwise_distances(X, squared=True), PERPLEXITY, 0
    )  # condensed
    reference += reference.T
    np.testing.assert_allclose(ours, reference, atol=1e-8)
    np.testing.assert_allclose(
        tsne_joint_probabilities(pairwise_distances(X), PERPLEXITY, "distances"), ours, atol=1e-12
    )
    assert ours.sum() == pytest.approx(1.0) and np.all(np.diag(ours) == 0) and np.allclose(ours, ours.T)




@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", backends())
def test_mds_loss_is_scikit_learn_normalized_stress(backend: str, dtype: str, sk_mds: SkMDS) -> None:
    rtol = tolerance(dtype) * 10
    for input_type, data in (("points", X), ("distances", pairwise_distances(X))):
        block = _wrap(MDS(2, input_type=input_type), "input", "coords", "norm")
        out, grads = evaluate_model(
            backend, block, {"coords": sk_mds.embedding_.astype(float)}, {"input": data, "norm": NORM}, dtype=dtype
        )
        assert float(out["output"]) == pytest.approx(_normalized(sk_mds.stress_), rel=rtol), (
            f"MDS({input_type}) stress on {backend}"
        )
        c, stress, _ = _torch_losses(sk_mds.embedding_.astype(float))
        stress.backward()
        np.testing.assert_allclose(grads["coords"], c.grad.numpy(), rtol=rtol, atol=rtol * np.abs(c.grad.numpy()).max())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", backends())
def test_tsne_loss_is_scikit_learn_kl_divergence(backend: str, dtype: str, sk_tsne: SkTSNE) -> None:
    rtol = tolerance(dtype) * 10
    p_joint = tsne_joint_probabilities(X, PERPLEXITY)
    block = _wrap(TSNE(2, input_type="points"), "input", "norm", "p_joint", "coords")
    out, grads = evaluate_model(
        backend,
        block,
        {"coords": sk_tsne.embedding_.astype(float)},
        {"input": X, "norm": NORM, "p_joint": p_joint},
        dtype=dtype,
    )
    # scikit-learn reports the loss of its last-but-one step: equal to 1e-4 once converged
    assert float(out["output"]) == pytest.approx(sk_tsne.kl_divergence_, rel=1e-3), f"TSNE KL on {backend}"
    c, _, kl = _torch_losses(sk_tsne.embedding_.astype(float))
    kl.backward()
    np.testing.assert_allclose(grads["coords"], c.grad.numpy(), rtol=rtol, atol=rtol * np.abs(c.grad.numpy()).max())


def _compiled(block: Model, keys: tuple[str, ...], data: dict[str, np.ndarray], backend: str) -> tuple[object, object]:
    backend_obj = backend_class(backend)(dtype=ml.float64)
    shapes = {**{k: list(v.shape) for k, v in data.items()}, "coords": [N, 2]}
    return ml.compile(
        _wrap(block, *keys), backend_obj, shapes=shapes, data_keys=set(data), trainable_keys={"coords"}
    ), backend_obj


TRAIN_BACKENDS = [b for b in ("numpy", "torch") if b in backends()]


@pytest.mark.parametrize("backend", TRAIN_BACKENDS)
def test_mds_trained_by_gradient_descent_reaches_scikit_learn_stress(backend: str, sk_mds: SkMDS) -> None:
    pm, be = _compiled(MDS(2, input_type="points"), ("input", "norm", "coords"), {"input": X, "norm": NORM}, backend)
    coords, feed = (
        be.array(np.random.default_rng(0).normal(size=(N, 2))),
        {"input": be.array(X), "norm": be.array(NORM)},
    )
    for _ in range(500):  # gradient descent on the raw stress S = output ** 2 * SUM_SQUARED / 2
        outputs, grads = pm.evaluate({"coords": coords}, feed, output_gradients=True)
        coords = coords - 0.005 * float(be.to_numpy(outputs["output"])) * SUM_SQUARED * grads["coords"]
    stress = float(be.to_numpy(pm.evaluate({"coords": coords}, feed)["output"]))
    assert stress <= np.sqrt(1.01) * _normalized(sk_mds.stress_)  # raw stress: scikit-learn's SMACOF 425.1, ours 423.6
    ours = pairwise_distances(be.to_numpy(coords))[np.triu_indices(N, 1)]
    assert np.corrcoef(ours, pairwise_distances(X)[np.triu_indices(N, 1)])[0, 1] >= 0.99


@pytest.mark.parametrize("backend", TRAIN_BACKENDS)
def test_tsne_trained_like_scikit_learn(backend: str, sk_tsne: SkTSNE) -> None:
    """scikit-learn's exact t-SNE optimiser (early exaggeration 12 for 250 steps with momentum 0.5, then
    momentum 0.8; learning rate 50; adaptive gains) driving our compiled gradients from a random start."""
    block = TSNE(2, input_type="points", preplexity=PERPLEXITY)
    p_joint = block.prepare(X)["p_joint"]
    pm, be = _compiled(
        block, ("input", "norm", "p_joint", "coords"), {"input": X, "norm": NORM, "p_joint": p_joint}, backend
    )
    coords = 1e-4 * np.random.default_rng(0).normal(size=(N, 2))
    fixed = {"input": be.array(X), "norm": be.array(NORM)}
    for it in range(1000):
        if it in (0, 250):
            update, gains = np.zeros_like(coords), np.ones_like(coords)
        feed = {**fixed, "p_joint": be.array(p_joint * (12.0 if it < 250 else 1.0))}
        _, grads = pm.evaluate({"coords": be.array(coords)}, feed, output_gradients=True)
        grad = be.to_numpy(grads["coords"])
        gains = np.where(update * grad < 0, gains + 0.2, gains * 0.8).clip(0.01)
        update = (0.5 if it < 250 else 0.8) * update - 50.0 * gains * grad
        coords = coords + update
    kl = float(
        be.to_numpy(pm.evaluate({"coords": be.array(coords)}, {**fixed, "p_joint": be.array(p_joint)})["output"])
    )
    assert kl <= 1.2 * sk_tsne.kl_divergence_ + 0.02  # scikit-learn: 0.050, ours: 0.047
    assert trustworthiness(X, coords, n_neighbors=5) >= 0.95  # scikit-learn's embedding: 0.985
