"""PyTorch hardening, round 2 (issue 25): special values on torch's vectorised CPU kernels, clean exits of
``torchrun`` jobs on a device mesh, and one ``torch.compile``d function per compiled model. Each test failed
before the fix it guards."""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path

import mithril as ml
import numpy as np
import pytest
import torch
from mithril.models import Linear, Model, Primitive, Relu
from mithril.types import Dtype
from mithril_testing.cases import FLOAT_UNARY, Case
from mithril_testing.conformance import run_reference
from mithril_testing.devices import run_torchrun

from mithril_backend_torch import TorchBackend

# -- 1. special values on the vectorised path -------------------------------------------------------
SPECIAL = np.array(
    [np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5, -2.0, 1e-30, 3e38, -3e38, 1e10, -1e10, 88.8, -88.8, 20.0, -20.0,
     1e-45, -1e-45, 1e-38, 10.0, -10.0, 5.0, -5.0, 0.5],
    np.float32,
)  # fmt: skip
"""NaN, infinities, signed zeros, huge, tiny and subnormal values, and ordinary ones."""


def _lanes(length: int) -> np.ndarray:
    """``length`` float32 values cycling through :data:`SPECIAL`: each special value lands in several SIMD
    lanes (AVX-512 holds 16 floats) and in the scalar tail when ``length`` is not a multiple of 16."""
    return np.resize(SPECIAL, length).astype(np.float32)


def _run(case: Case, x: np.ndarray, backend: TorchBackend) -> np.ndarray:
    model = Primitive(case.primitive, **case.attrs)
    pm = ml.compile(model, backend, shapes={"input": list(x.shape)}, data_keys={"input"}, jit=False)
    return np.asarray(backend.to_numpy(pm.evaluate({}, {"input": backend.array(x)})["output"]), np.float64)


def _assert_same_specials(got: np.ndarray, expected: np.ndarray, x: np.ndarray, what: str) -> None:
    """NaN where NumPy has NaN, the same infinities and signed zeros, finite values within float32 rounding."""
    same_nan = np.isnan(got) == np.isnan(expected)
    same_inf = np.where(np.isinf(expected) | np.isinf(got), got == expected, True)
    zeros = (got == 0) & (expected == 0)
    same_zero_sign = np.where(zeros, np.signbit(got) == np.signbit(expected), True)
    finite = np.isfinite(expected) & np.isfinite(got)
    close = np.where(finite, np.abs(got - expected) <= 1e-5 * np.maximum(1.0, np.abs(expected)), True)
    bad = ~(same_nan & same_inf & same_zero_sign & close)
    wrong = {float(x[i]): (float(got[i]), float(expected[i])) for i in np.flatnonzero(bad)}
    assert not wrong, f"{what}: input -> (torch, NumPy reference): {wrong}"


UNARY = [Case(name, {}, id=name) for name in FLOAT_UNARY] + [
    Case("gelu", {}, {"approximate": True}, id="gelu-tanh"),
    Case("leaky_relu", {}, {"slope": 0.2}, id="leaky_relu-slope"),
]


@pytest.mark.parametrize("length", [1, 7, 67, 256])
@pytest.mark.parametrize("case", UNARY, ids=lambda c: c.id)
def test_float32_special_values_match_numpy_on_vectorised_kernels(case: Case, length: int) -> None:
    backend = TorchBackend(dtype=ml.float32)
    x = _lanes(length)
    expected = run_reference(case, {"input": x}, dtype=Dtype.float32)["output"].astype(np.float64)
    _assert_same_specials(_run(case, x, backend), expected, x, f"{case.id} float32, {length} values")


@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_of_infinity_and_huge_values_forward_and_gradient_on_long_float32_vectors(approximate: bool) -> None:
    """``gelu(+inf) = +inf`` (torch's AVX-512 kernel gave NaN) and ``gelu(3e38) = 3e38`` (it overflowed), in
    every lane; the gradient there is 1, elsewhere torch's own (float64) gelu gradient."""
    backend = TorchBackend(dtype=ml.float32)
    x = np.resize(np.array([np.inf, 3e38, 1.0, -2.0, 1e10, 0.5, 12.0, -np.inf, 9.5], np.float32), 101)
    model = Primitive("gelu", approximate=approximate)
    pm = ml.compile(model, backend, shapes={"input": [x.size]}, trainable_keys={"input"}, jit=False)
    outputs, grads = pm.evaluate({"input": backend.array(x)}, output_gradients={"output": backend.ones(x.size)})
    got = backend.to_numpy(outputs["output"]).astype(np.float64)
    grad = backend.to_numpy(grads["input"]).astype(np.float64)

    big = x > 10
    np.testing.assert_array_equal(got[big], x[big])  # +inf, 3e38, 1e10, 12 unchanged
    np.testing.assert_array_equal(grad[big], 1.0)
    assert np.isnan(got[np.isneginf(x)]).all()  # -inf * Phi(-inf) = -inf * 0, as NumPy's reference
    finite = np.isfinite(x) & ~big
    x64 = torch.tensor(x[finite], dtype=torch.float64, requires_grad=True)
    y64 = torch.nn.functional.gelu(x64, approximate="tanh" if approximate else "none")
    (g64,) = torch.autograd.grad(y64.sum(), x64)
    np.testing.assert_allclose(got[finite], y64.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(grad[finite], g64.numpy(), rtol=1e-5)


def test_gelu_does_not_depend_on_the_memory_layout() -> None:
    """A strided view runs torch's scalar loop, a contiguous tensor its vectorised one: same results."""
    from mithril_backend_torch.ops.elementwise import gelu

    values = torch.tensor(_lanes(64))
    strided = torch.stack([values, torch.zeros(64)], dim=1)[:, 0]
    assert not strided.is_contiguous()
    for approximate in (False, True):
        vectorised, scalar = gelu(values, approximate=approximate), gelu(strided, approximate=approximate)
        torch.testing.assert_close(vectorised, scalar, equal_nan=True, rtol=0, atol=0)


# -- 2. torchrun jobs on a device mesh exit cleanly ------------------------------------------------------
_EXIT_SCRIPT = '''
import atexit, os, sys, time, weakref
import mithril as ml, numpy as np, torch.distributed as dist
from mithril.models import MLP

def gloo_threads():
    names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    return names.count("pt_gloo_runloop")

def after_mithril():  # registered first, so it runs after the backend's own exit hook, before finalisation
    alive, threads = groups[0]() is not None, gloo_threads()
    if alive or threads > before:
        print(f"mesh group alive at exit: {alive}; gloo threads {threads} > {before}", flush=True)
        os._exit(3)

def settled_gloo_threads():  # a new group's threads name themselves once they run
    counts = [gloo_threads()]
    while len(counts) < 5 or len(set(counts[-5:])) > 1:
        time.sleep(0.05)
        counts.append(gloo_threads())
    return counts[-1]

atexit.register(after_mithril)
dist.init_process_group("gloo")
dist.barrier()
before = settled_gloo_threads()
backend, single = ml.TorchBackend(dtype=ml.float32, device_mesh=(2,)), ml.TorchBackend(dtype=ml.float32)
groups = [weakref.ref(backend.mesh.get_group())]
x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
for parallelism in ("data", "model"):
    model = MLP(input_size=16, hidden_sizes=[32, 32], output_size=8)
    pm = ml.compile(model, backend, shapes={"input": [8, 16]}, data_keys={"input"}, parallelism=parallelism)
    ref = ml.compile(model, single, shapes={"input": [8, 16]}, data_keys={"input"})
    got = backend.to_numpy(pm.evaluate(pm.randomize_params(seed=1), {"input": x})["output"])
    want = single.to_numpy(ref.evaluate(ref.randomize_params(seed=1), {"input": x})["output"])
    assert np.allclose(got, want, atol=1e-5), parallelism
if sys.argv[1] == "user-destroys":
    dist.destroy_process_group()
print("checked", flush=True)
'''


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts the gloo threads through /proc (Linux)")
@pytest.mark.parametrize("ending", ["exit", "user-destroys"])
def test_torchrun_scripts_on_a_mesh_exit_cleanly(tmp_path: Path, ending: str) -> None:
    """Before: the mesh ran on the default group, which torch keeps alive to the end, so its gloo threads
    could still release a collective's tensors (taking the GIL) while Python finalised: SIGABRT,
    ``terminate called without an active exception``. Now the mesh's groups are destroyed and their threads
    joined at exit, with or without the user's ``destroy_process_group()``."""
    script = tmp_path / "job.py"
    script.write_text(_EXIT_SCRIPT)
    for _ in range(2):
        done = run_torchrun(script, ending)
        log = done.stdout[-3000:] + done.stderr[-3000:]
        assert done.returncode == 0 and done.stdout.count("checked") == 2, log
        assert "terminate called" not in done.stderr and "mesh group alive" not in done.stdout, log


# -- 4. one compiled function per model ------------------------------------------------------------------
def _mlp(width: int) -> Model:
    model = Model()
    model |= Linear(width)(input="input", output="hidden")
    model |= Relu()(input="hidden", output=ml.IOKey("output"))
    return model


def test_twenty_jitted_models_each_get_their_own_compiled_function() -> None:
    """Before: ``torch.compile`` wrapped the lazy-compile trampoline whose one code object every model
    shared; from the 9th model on dynamo hit ``recompile_limit`` (8) and ran the models uncompiled, silently."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    backend = TorchBackend(dtype=ml.float32)
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    dynamo_log = logging.getLogger("torch._dynamo")
    dynamo_log.addHandler(handler)
    try:
        for index in range(20):
            width = 3 + index  # 20 different models
            pm = ml.compile(_mlp(width), backend, shapes={"input": [2, 4]}, jit=True, jit_options={"backend": "eager"})
            params = pm.randomize_params(seed=index)
            x = backend.array(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4))
            before = counters["stats"]["unique_graphs"]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outputs, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": backend.ones(2, width)})
            assert counters["stats"]["unique_graphs"] > before, f"model {index} ran without a compiled graph"
            expected = torch.relu(x @ params["weight"].T + params["bias"])
            torch.testing.assert_close(outputs["output"], expected)
            assert grads["weight"].shape == (width, 4)
    finally:
        dynamo_log.removeHandler(handler)
    limits = [r for r in records if re.search("recompile_limit|cache_size_limit", r)]
    assert not limits, limits[:2]
