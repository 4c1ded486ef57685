"""ResNet against independent references: a torchvision-named PyTorch ResNet written here and
``transformers.ResNetForImageClassification``, both with random weights and random running statistics."""

from __future__ import annotations

import re
from typing import Any

import mithril as ml
import numpy as np
import pytest
import torch
from torch import nn

from mithril_models import from_hf_config, load_hf, save_safetensors
from mithril_models.checkpoints import CheckpointError
from mithril_models.resnet import ResNet, ResNetConfig, resnet, resnet18, resnet34, resnet50, resnet101, resnet152
from mithril_models.testing import assert_matches, backend_params, make_backend, max_relative_error, torch_resnet

IMAGE = [2, 3, 32, 32]
TRAIN_IMAGE = [2, 3, 64, 64]  # batch statistics over 2x2 maps in the last stage, not 1x1: better conditioned
TINY = {
    "basic": {"block": "basic", "depths": (2, 1, 1, 1), "widths": (8, 16, 32, 64), "stem_width": 8, "num_classes": 5},
    "bottleneck": {"block": "bottleneck", "depths": (2, 1), "widths": (4, 8), "stem_width": 8, "num_classes": 3},
}
BACKENDS = [*backend_params(), pytest.param("numpy", ml.float64, id="numpy-float64")]


def _randomise_batch_norms(module: nn.Module, seed: int) -> nn.Module:
    """Non-trivial BatchNorm affine parameters and running statistics, so both really get tested."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, nn.BatchNorm2d):
                n = sub.num_features
                sub.weight.copy_(torch.rand(n, generator=generator) + 0.5)
                sub.bias.copy_(torch.randn(n, generator=generator) * 0.1)
                sub.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
                sub.running_var.copy_(torch.rand(n, generator=generator) * 1.5 + 0.5)
                sub.num_batches_tracked.fill_(7)
    return module


def _torch_reference(kind: str, seed: int = 0) -> nn.Module:
    """The torchvision-named reference (``mithril_models.testing.torch_resnet``) of ``TINY[kind]``'s sizes."""
    torch.manual_seed(seed)
    return _randomise_batch_norms(torch_resnet(**TINY[kind]), seed).eval()


def _images(seed: int = 1, shape: list[int] = IMAGE) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _run_reference(net: nn.Module, x: np.ndarray, dtype: Any) -> np.ndarray:
    net = net.double() if dtype == ml.float64 else net.float()
    with torch.no_grad():
        out = net(torch.from_numpy(x.astype(np.float64 if dtype == ml.float64 else np.float32)))
    return (out.logits if hasattr(out, "logits") else out).numpy()


def _compile(model: ResNet, backend_name: str, dtype: Any, *, inference: bool = True, shape: list[int] = IMAGE) -> Any:
    backend = make_backend(backend_name, dtype)
    return ml.compile(model, backend, shapes={"input": shape}, data_keys={"input"}, inference=inference)


def _numpy(pm: Any, value: Any) -> np.ndarray:
    return np.asarray(pm.backend.to_numpy(value), dtype=np.float64)


# -- logits against the torchvision-named reference, every backend ------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["basic", "bottleneck"])
@pytest.mark.parametrize(("backend_name", "dtype"), BACKENDS)
def test_torchvision_state_dict_gives_the_reference_logits(kind: str, backend_name: str, dtype: Any) -> None:
    net = _torch_reference(kind)
    x = _images()
    expected = _run_reference(net, x, dtype)
    pm = _compile(resnet(**TINY[kind]), backend_name, dtype)
    params = load_hf(pm, net.float().state_dict())
    got = _numpy(
        pm, pm.evaluate(params, {"input": x.astype(np.float32 if dtype == ml.float32 else np.float64)})["output"]
    )
    assert_matches(got, expected, dtype, f"{kind} ResNet logits on {backend_name} {dtype.value}")


def test_long_names_are_torchvision_state_dict_keys() -> None:
    net = _torch_reference("bottleneck")
    pm = ml.compile(
        resnet(**TINY["bottleneck"]),
        ml.NumpyBackend(),
        shapes={"input": IMAGE},
        use_short_namings=False,
        inference=True,
    )
    expected = {k for k in net.state_dict() if not k.endswith("num_batches_tracked")}
    assert set(pm.param_keys) | set(pm.buffer_keys) == expected
    assert set(pm.buffer_keys) == {k for k in expected if k.endswith(("running_mean", "running_var"))}


# -- Hugging Face transformers ------------------------------------------------------------------------------
HF_CONFIGS = {
    "basic": {"layer_type": "basic", "embedding_size": 8, "hidden_sizes": [8, 16], "depths": [2, 1], "num_labels": 4},
    "bottleneck": {
        "layer_type": "bottleneck", "embedding_size": 8, "hidden_sizes": [16, 32], "depths": [1, 2], "num_labels": 3,
        "downsample_in_first_stage": True,
    },
}  # fmt: skip


def _hf_reference(options: dict[str, Any], seed: int = 0) -> Any:
    from transformers import ResNetConfig as HFResNetConfig
    from transformers import ResNetForImageClassification

    torch.manual_seed(seed)
    net = ResNetForImageClassification(HFResNetConfig(**options))
    return _randomise_batch_norms(net, seed).eval()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["basic", "bottleneck"])
@pytest.mark.parametrize(("backend_name", "dtype"), BACKENDS)
def test_transformers_checkpoint_gives_its_logits(kind: str, backend_name: str, dtype: Any) -> None:
    net = _hf_reference(HF_CONFIGS[kind])
    x = _images(2)
    expected = _run_reference(net, x, dtype)
    pm = _compile(from_hf_config(net.config), backend_name, dtype)
    params = load_hf(pm, net.float().state_dict())
    got = _numpy(pm, pm.evaluate(params, {"input": x})["output"])
    assert_matches(got, expected, dtype, f"HF {kind} ResNet logits on {backend_name} {dtype.value}")


@pytest.mark.parametrize(
    "options",
    [
        {"hidden_act": "gelu"},
        {"hidden_act": "silu", "num_channels": 1},
        {"hidden_act": "gelu_new", "downsample_in_bottleneck": True},
        {"hidden_act": "tanh", "downsample_in_first_stage": False, "layer_type": "basic", "hidden_sizes": [8, 12]},
    ],
    ids=["gelu", "silu-1channel", "gelu_new-stride_in_1x1", "tanh-basic"],
)
def test_transformers_config_options(options: dict[str, Any]) -> None:
    """Each supported config variation, on NumPy float64 (HF keeps ReLU inside blocks whatever hidden_act)."""
    net = _hf_reference({**HF_CONFIGS["bottleneck"], **options})
    x = _images(3, [2, options.get("num_channels", 3), 32, 32])
    expected = _run_reference(net, x, ml.float64)
    pm = _compile(from_hf_config(net.config), "numpy", ml.float64, shape=list(x.shape))
    got = pm.evaluate(load_hf(pm, net.state_dict()), {"input": x})["output"]
    assert_matches(got, expected, ml.float64, f"HF ResNet {options}")


def test_transformers_base_model_checkpoint_loads_into_a_headless_resnet() -> None:
    """``ResNetModel`` keys lack ``resnet.``; with ``num_labels=0`` the output is the pooled features."""
    from transformers import ResNetConfig as HFResNetConfig
    from transformers import ResNetModel

    config = HFResNetConfig(**{**HF_CONFIGS["basic"], "num_labels": 0})
    torch.manual_seed(0)
    net = _randomise_batch_norms(ResNetModel(config), 0).eval().double()
    x = _images(4)
    with torch.no_grad():
        expected = net(torch.from_numpy(x)).pooler_output.flatten(1).numpy()
    pm = _compile(from_hf_config(config), "numpy", ml.float64)
    got = pm.evaluate(load_hf(pm, net.state_dict()), {"input": x})["output"]
    assert_matches(got, expected, ml.float64, "HF base model pooled features")


# -- training mode: batch statistics and running-statistics updates ------------------------------------------
@pytest.mark.parametrize(
    ("backend_name", "dtype"), [("numpy", ml.float64), ("torch", ml.float32)], ids=["numpy-float64", "torch-float32"]
)
@pytest.mark.parametrize("kind", ["basic", "bottleneck"])
def test_training_mode_matches_torch_train(kind: str, backend_name: str, dtype: Any) -> None:
    net = _torch_reference(kind)
    state = {k: v.clone() for k, v in net.state_dict().items()}
    x = _images(5, TRAIN_IMAGE)
    pm = _compile(resnet(**TINY[kind], training=True), backend_name, dtype, shape=TRAIN_IMAGE)
    params = load_hf(pm, state)
    outputs = pm.evaluate(params, {"input": x})
    net = net.double() if dtype == ml.float64 else net.float()
    net.train()
    with torch.no_grad():
        expected = net(torch.from_numpy(x).to(torch.float64 if dtype == ml.float64 else torch.float32)).numpy()
    assert_matches(_numpy(pm, outputs["output"]), expected, dtype, "training-mode logits")
    reference = net.state_dict()
    assert len(pm.buffer_updates) == len(pm.buffer_keys) == sum(k.endswith("running_var") for k in reference) * 2
    updated = pm.update_buffers(params, outputs)
    for buffer in pm.buffer_keys:
        path = pm.input_paths[buffer]
        assert_matches(_numpy(pm, updated[buffer]), reference[path].numpy(), dtype, f"updated {path}")
        assert max_relative_error(_numpy(pm, updated[buffer]), state[path].numpy()) > 1e-3, f"{path} was not updated"


# -- gradients -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("backend_name", ["numpy", "torch"])
def test_gradients_match_torch_autograd(backend_name: str, training: bool) -> None:
    net = _torch_reference("bottleneck").double()
    x = _images(6)
    cotangent = np.random.default_rng(7).standard_normal([IMAGE[0], TINY["bottleneck"]["num_classes"]])
    pm = _compile(resnet(**TINY["bottleneck"], training=training), backend_name, ml.float64, inference=False)
    params = load_hf(pm, net.state_dict())
    _, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": cotangent})
    net.train(training)
    logits = net(torch.from_numpy(x))
    (logits * torch.from_numpy(cotangent)).sum().backward()
    reference = {name: p.grad.numpy() for name, p in net.named_parameters()}
    assert set(grads) == set(pm.param_keys)
    assert {pm.input_paths[name] for name in grads} == set(reference)
    for name, grad in grads.items():
        path = pm.input_paths[name]
        assert_matches(_numpy(pm, grad), reference[path], ml.float64, f"gradient of {path}")


# -- presets ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("builder", "count"),
    [
        (resnet18, 11_689_512),
        (resnet34, 21_797_672),
        (resnet50, 25_557_032),
        pytest.param(resnet101, 44_549_160, marks=pytest.mark.slow),
        pytest.param(resnet152, 60_192_808, marks=pytest.mark.slow),
    ],
    ids=["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"],
)
def test_presets_have_torchvision_parameter_counts(builder: Any, count: int) -> None:
    pm = ml.compile(builder(), ml.NumpyBackend(), shapes={"input": [1, 3, 32, 32]}, data_keys={"input"}, inference=True)
    if builder in (resnet18, resnet50):  # the two the brief names: really materialise the parameters
        params = pm.randomize_params(seed=0)
        sizes = {name: int(np.prod(np.shape(value))) for name, value in params.items()}
    else:
        sizes = {name: int(np.prod(pm.shapes[name])) for name in pm.param_keys}
    assert sum(sizes[name] for name in pm.param_keys) == count
    assert pm.shapes["output"] == [1, 1000]


def test_builders_are_registered_and_dispatched() -> None:
    from mithril.models import resnet18 as registered
    from transformers import ResNetConfig as HFResNetConfig

    assert registered is resnet18
    model = from_hf_config(HFResNetConfig(**HF_CONFIGS["basic"]))
    assert isinstance(model, ResNet) and model.family == "resnet"
    assert model.config == ResNetConfig(block="basic", depths=(2, 1), widths=(8, 16), stem_width=8, num_classes=4)
    assert resnet18(num_classes=7, training=True).config.training


@pytest.mark.parametrize("backend_name", ["numpy", "torch", pytest.param("jax", marks=pytest.mark.slow)])
def test_symbolic_batch_and_image_size_on_python_backends(backend_name: str) -> None:
    pytest.importorskip(f"mithril_backend_{backend_name}")
    net = _torch_reference("basic")
    pm = ml.compile(
        resnet(**TINY["basic"]), make_backend(backend_name, ml.float32), data_keys={"input"}, inference=True
    )
    params = load_hf(pm, net.state_dict())
    for shape in ([1, 3, 32, 32], [3, 3, 40, 48]):
        x = _images(8, shape)
        got = _numpy(pm, pm.evaluate(params, {"input": x.astype(np.float32)})["output"])
        assert_matches(got, _run_reference(net, x, ml.float32), ml.float32, f"{backend_name} on {shape}")


# -- checkpoint errors and formats ----------------------------------------------------------------------------
def test_strict_loading_lists_missing_unexpected_and_misshaped_keys() -> None:
    state = {k: v.numpy() for k, v in _torch_reference("basic").state_dict().items()}
    del state["layer2.0.downsample.1.running_var"]
    state["layer9.0.conv1.weight"] = np.zeros((1, 1, 1, 1), np.float32)
    state["fc.weight"] = np.zeros((6, 64), np.float32)
    pm = _compile(resnet(**TINY["basic"]), "numpy", ml.float32)
    with pytest.raises(CheckpointError) as error:
        load_hf(pm, state)
    message = str(error.value)
    assert "torchvision/timm" in message
    assert "missing" in message and "running_var" in message
    assert "unexpected" in message and "layer9.0.conv1.weight" in message
    assert "shape mismatch" in message and "fc.weight" in message and "[6, 64]" in message and "[5, 64]" in message
    assert "num_batches_tracked" not in message
    with pytest.warns(UserWarning, match="layer9"):
        params = load_hf(pm, state, strict=False)
    assert set(params) == set(pm.param_keys) | set(pm.buffer_keys)


def test_safetensors_file_and_data_parallel_prefix(tmp_path: Any) -> None:
    net = _torch_reference("bottleneck")
    path = tmp_path / "resnet.safetensors"
    save_safetensors(path, {f"module.{k}": v.numpy() for k, v in net.state_dict().items()})
    x = _images(9)
    pm = _compile(resnet(**TINY["bottleneck"]), "numpy", ml.float64)
    got = pm.evaluate(load_hf(pm, path), {"input": x})["output"]
    assert_matches(got, _run_reference(net, x, ml.float64), ml.float64, "from .safetensors")
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=re.escape(str(truncated))):
        load_hf(pm, truncated)


def test_bad_configurations_say_what_was_expected() -> None:
    with pytest.raises(ValueError, match="block must be one of"):
        resnet(block="wide")
    with pytest.raises(ValueError, match="one entry per stage"):
        resnet(depths=[1, 1], widths=[8])
    with pytest.raises(ValueError, match="positive integers"):
        resnet(depths=[1, 0], widths=[8, 8])
    with pytest.raises(ValueError, match="num_classes"):
        resnet18(num_classes=-1)
    with pytest.raises(TypeError, match="unknown option"):
        resnet(groups=32)
    with pytest.raises(TypeError, match="needs a ResNetConfig"):
        ResNet({"block": "basic"})
    with pytest.raises(ValueError, match="hidden_act"):
        from_hf_config({"model_type": "resnet", "hidden_act": "mish"})
    with pytest.raises(ValueError, match="multiples of 4"):
        from_hf_config({"model_type": "resnet", "hidden_sizes": [10, 20], "depths": [1, 1]})
    with pytest.raises(ValueError, match="layer_type"):
        from_hf_config({"model_type": "resnet", "layer_type": "preact"})
