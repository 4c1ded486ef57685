"""C kernels of identical call sites are compiled once per program (``CKernels``): a model of repeated
layers (GPT-2's twelve blocks) builds a handful of kernels, not one per node, and each call site still
reads and writes its own tensors."""

from __future__ import annotations

from collections import Counter

import mithril as ml
import numpy as np
from mithril.models import Erf, Gelu, Model, Randn
from mithril_testing.references import REFERENCES as R

LAYERS = 4


def _symbols(compiled: ml.PhysicalModel) -> list[str]:
    return [symbol for _, symbol in compiled.program.ckernels.slots]


def _repeated_chains(shapes: list[list[int]]) -> Model:
    """``y_i = gelu_tanh(erf(x_i))`` for each shape: ggml has neither op, so both are C custom ops."""
    model = Model()
    for i in range(len(shapes)):
        model |= Erf()(input=f"x{i}", output=f"e{i}")
        model |= Gelu(approximate=True)(input=f"e{i}", output=f"y{i}")
    return model


def _gelu_tanh_grad(e: np.ndarray) -> np.ndarray:
    c = np.sqrt(2 / np.pi)
    t = np.tanh(c * (e + 0.044715 * e**3))
    return 0.5 * (1 + t) + 0.5 * e * (1 - t**2) * c * (1 + 3 * 0.044715 * e**2)


def test_identical_layers_share_one_compiled_kernel_and_keep_their_own_data() -> None:
    shapes = [[4, 6]] * LAYERS
    compiled = ml.compile(
        _repeated_chains(shapes),
        ml.GGMLBackend(threads=2),
        shapes={f"x{i}": s for i, s in enumerate(shapes)},
        trainable_keys={f"x{i}" for i in range(LAYERS)},
    )
    uses = Counter(_symbols(compiled))  # forward kernels serve evaluate and evaluate_gradients
    assert sum(uses.values()) >= 4 * LAYERS and all(n % LAYERS == 0 for n in uses.values()), uses
    assert len(compiled.program.ckernels.sources) == len(uses)  # each kernel in the source once

    rng = np.random.default_rng(0)
    params = {f"x{i}": rng.standard_normal((4, 6)).astype(np.float32) * (i + 1) for i in range(LAYERS)}
    cotangents = {f"y{i}": rng.standard_normal((4, 6)).astype(np.float32) for i in range(LAYERS)}
    out, grads = compiled.evaluate(params, {}, output_gradients=cotangents)
    for i in range(LAYERS):
        x = params[f"x{i}"].astype(np.float64)
        e = R["erf"](x)
        np.testing.assert_allclose(out[f"y{i}"], R["gelu"](e, approximate=True), rtol=1e-5, atol=1e-6)
        want = cotangents[f"y{i}"] * _gelu_tanh_grad(e) * 2 / np.sqrt(np.pi) * np.exp(-(x**2))
        np.testing.assert_allclose(grads[f"x{i}"], want, rtol=1e-4, atol=1e-5)


def test_other_shapes_and_random_draws_get_kernels_of_their_own() -> None:
    shapes = [[4, 6], [4, 6], [3, 6]]
    compiled = ml.compile(
        _repeated_chains(shapes), ml.GGMLBackend(threads=2), shapes={f"x{i}": s for i, s in enumerate(shapes)}
    )
    symbols = _symbols(compiled)
    assert len(symbols) == 6 and len(set(symbols)) == 4, symbols  # [3, 6] compiles its own erf and gelu

    model = Model()
    model |= Randn(shape=(4, 6))(output="a")
    model |= Randn(shape=(4, 6))(output="b")
    random = ml.compile(model, ml.GGMLBackend(threads=2))
    assert len(set(_symbols(random))) == 2  # each random node draws its own stream (its id is in its code)
    out = random.evaluate({}, {})
    assert not np.allclose(out["a"], out["b"])
