"""Training the model families with the compiled step against ``transformers`` trained by hand in PyTorch:
ResNet (BatchNorm on batch statistics: the running statistics are buffers the step updates too)."""

from __future__ import annotations

import mithril as ml
import numpy as np
import pytest
from mithril import optim
from mithril.models import CrossEntropy, TrainModel

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from mithril_models import load_hf  # noqa: E402
from mithril_models.resnet import from_hf_config  # noqa: E402

BACKENDS = [
    ("NumpyBackend", ml.float64),
    ("TorchBackend", ml.float64),
    ("JaxBackend", ml.float64),
    ("CBackend", ml.float64),
]


@pytest.mark.parametrize(("backend_name", "dtype"), BACKENDS, ids=[b for b, _ in BACKENDS])
def test_resnet_training_steps_match_transformers(backend_name: str, dtype: ml.Dtype) -> None:
    """Regression: with buffers in the model, train_step returned the old parameters (only the running
    statistics changed): the buffers' update overwrote the optimizer's."""
    torch.manual_seed(0)
    config = transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic", num_labels=3
    )
    reference = transformers.ResNetForImageClassification(config).double().train()
    initial = {k: v.detach().clone() for k, v in reference.state_dict().items()}
    train = TrainModel(from_hf_config(config, training=True))
    train.add_loss(CrossEntropy(), reduce_steps=[ml.Mean()], input="output", target="label")
    shapes = {"input": [4, 3, 16, 16], "label": [4]}
    backend = getattr(ml, backend_name)(dtype=dtype)
    pm = ml.compile(
        train,
        backend,
        shapes=shapes,
        data_keys=set(shapes),
        use_short_namings=False,
        optimizer=optim.SGD(lr=0.1, momentum=0.9),
    )
    state = pm.init_state(load_hf(pm, initial))
    torch_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x, y = rng.standard_normal(shapes["input"]), rng.integers(0, 3, 4)
        state, outputs = pm.train_step(state, {"input": x, "label": y})
        torch_opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(reference(torch.from_numpy(x)).logits, torch.from_numpy(y))
        loss.backward()
        torch_opt.step()
        np.testing.assert_allclose(
            float(np.asarray(backend.to_numpy(outputs["final_cost"]))), float(loss.detach()), rtol=1e-10
        )
    expected = load_hf(
        ml.compile(
            train,
            ml.NumpyBackend(dtype=ml.float64),
            shapes=shapes,
            data_keys=set(shapes),
            use_short_namings=False,
            inference=True,
        ),
        reference.state_dict(),
    )
    assert set(pm.buffer_keys) and set(pm.param_keys)
    for key, value in expected.items():
        np.testing.assert_allclose(
            np.asarray(backend.to_numpy(state.params[key])), value, rtol=1e-9, atol=1e-12, err_msg=key
        )
