"""Float32 CPU inference takes oneDNN's ``linear`` only where its fixed per-call cost pays (big weights or
big products); everything else, and anything recording a gradient, takes ``F.linear``: the same numbers."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mithril_backend_torch.ops import _onednn, linalg


@pytest.mark.parametrize(
    ("rows", "inputs", "outputs", "expected"),
    [
        (1, 768, 768, True),  # GPT-2's attention projections while decoding: the weight alone qualifies
        (1, 768, 50257, True),  # the LM head
        (128, 784, 512, True),  # 2**25.6 multiply-adds
        (128, 512, 256, True),  # exactly 2**24
        (2, 8, 8, False),
        (32, 256, 256, False),
        (128, 256, 10, False),
        (1, 724, 724, False),  # just under 2**19 weight elements
    ],
)
def test_the_size_gate(rows: int, inputs: int, outputs: int, expected: bool) -> None:
    x, w = torch.empty(rows, inputs), torch.empty(outputs, inputs)
    assert _onednn.large_enough(x, w) is expected
    assert _onednn.usable(x, w, None) is (expected and _onednn.available())


def test_a_recorded_gradient_or_other_dtype_never_takes_onednn() -> None:
    x, w, b = torch.ones(1, 768), torch.ones(768, 768), torch.ones(768)
    assert not _onednn.usable(x, w.requires_grad_(True), b)
    assert not _onednn.usable(x.double(), w.detach().double(), b.double())


@pytest.mark.parametrize("shape", [(2, 8, 8), (1, 768, 768), (3, 5, 768, 768)])
def test_both_paths_give_f_linears_numbers(shape: tuple[int, ...]) -> None:
    *lead, inputs, outputs = shape
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(*lead, inputs, generator=generator)
    w, b = torch.randn(outputs, inputs, generator=generator), torch.randn(outputs, generator=generator)
    with torch.no_grad():
        torch.testing.assert_close(linalg.linear(x, w, b), F.linear(x, w, b), rtol=1e-5, atol=1e-4)
