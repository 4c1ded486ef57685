"""A ResNet-18-shaped Conv2d+BatchNorm+ReLU(+MaxPool) stack on 1x3x224x224, float32, BatchNorm with batch
statistics: Mithril on NumPy, C and GGML (whichever are installed) vs PyTorch eager, forward and
forward+backward, in this process. Targets (ratio of medians): forward NumPy <= 1.5, C <= 1.0, GGML
<= 1.3 (those of ResNet-18 in ``bench/resnet18.py``); forward+backward C <= 1.2.

The stack follows ResNet-18's conv layout (stem 7x7/2 + maxpool, then 4 stages of four 3x3 convs with
64/128/256/512 channels, the first conv of stages 2-4 with stride 2), without the residual adds.

    python bench/conv.py [numpy,c,ggml]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
THREADS = 2
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, str(THREADS))

import mithril as ml  # noqa: E402
from _timing import interleaved, report  # noqa: E402
from mithril.models import BatchNorm2d, Conv2d, MaxPool2D, Model, Relu  # noqa: E402

STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))
TARGETS = {"numpy": (1.5, None), "c": (1.0, 1.2), "ggml": (1.3, None)}
"""Backend -> (forward target, forward+backward target), ratios to PyTorch eager."""


def layer_plan() -> list[tuple[int, int, int, int]]:
    """(in_channels, out_channels, kernel, stride) for every conv."""
    plan = [(3, 64, 7, 2)]
    channels = 64
    for out, stride in STAGES:
        for i in range(4):
            plan.append((channels, out, 3, stride if i == 0 else 1))
            channels = out
    return plan


def mithril_stack() -> Model:
    model = Model()
    for i, (cin, cout, k, stride) in enumerate(layer_plan()):
        conv = Conv2d(cout, k, stride=stride, padding=k // 2, use_bias=False, in_channels=cin)
        if i == 0:
            model |= conv(input="input")
        else:
            model += conv
        model += BatchNorm2d(cout)
        model += Relu()
        if i == 0:
            model += MaxPool2D(kernel_size=3, stride=2, padding=1)
    return model


def torch_stack(torch, params: dict[str, np.ndarray]):
    layers = []
    convs = [k for k in params if k.startswith("weight") and params[k].ndim == 4]
    for i, (cin, cout, k, stride) in enumerate(layer_plan()):
        conv = torch.nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)
        conv.weight.data = torch.from_numpy(np.ascontiguousarray(params[convs[i]]))
        layers += [conv, torch.nn.BatchNorm2d(cout), torch.nn.ReLU()]
        if i == 0:
            layers.append(torch.nn.MaxPool2d(3, 2, 1))
    return torch.nn.Sequential(*layers).train()


def compare_with_torch(backend: object, label: str, target: float | None, backward_target: float | None = None) -> None:
    """Time the conv stack on ``backend`` against the same stack in PyTorch eager (forward, forward+backward),
    each with its target (``None``: the ratio only)."""
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed: nothing to compare against (pip install torch==2.13.0)")
        return
    torch.set_num_threads(THREADS)
    pm = ml.compile(mithril_stack(), backend, shapes={"input": [1, 3, 224, 224]})
    params = pm.randomize_params(seed=0)
    x = backend.randn(1, 3, 224, 224)
    net = torch_stack(torch, params)
    tx = torch.from_numpy(x)
    out = pm.evaluate(params, {"input": x})["output"]
    deviation = float(np.abs(out - net(tx).detach().numpy()).max())
    g = np.ones_like(out)

    def torch_forward():
        with torch.no_grad():
            net(tx)

    def torch_backward():
        net.zero_grad(set_to_none=True)
        net(tx).backward(torch.from_numpy(g))

    print(f"torch threads: {torch.get_num_threads()}; max |{label} - torch| forward: {deviation:.2e}")
    fwd = interleaved(
        {"PyTorch eager": torch_forward, label: lambda: pm.evaluate(params, {"input": x})}, rounds=5, repeats=3
    )
    report("ResNet-18-shaped conv stack, 1x3x224x224, forward", fwd, "PyTorch eager", target)
    both = interleaved(
        {
            "PyTorch eager": torch_backward,
            label: lambda: pm.evaluate(params, {"input": x}, output_gradients={"output": g}),
        },
        rounds=5,
        repeats=3,
    )
    report("ResNet-18-shaped conv stack, 1x3x224x224, forward+backward", both, "PyTorch eager", backward_target)


def main() -> None:
    makers = {
        "numpy": ("Mithril NumPy", lambda: ml.NumpyBackend(dtype=ml.float32)),
        "c": ("Mithril C", lambda: ml.CBackend(dtype=ml.float32, threads=THREADS)),
        "ggml": ("Mithril GGML", lambda: ml.GGMLBackend(threads=THREADS)),
    }
    for name in (sys.argv[1] if len(sys.argv) > 1 else "numpy,c,ggml").split(","):
        label, make = makers[name]
        try:
            backend = make()
        except Exception as exc:
            print(f"{label}: skipped ({type(exc).__name__}: {exc})")
            continue
        compare_with_torch(backend, label, *TARGETS[name])


if __name__ == "__main__":
    main()
