"""C-specific behaviour: static shapes, compiler errors, cache, thread safety, the seeds' MLP/CNN
examples, BLAS fallback and the exported standalone program. Only core + this package are needed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import mithril as ml
import numpy as np
import pytest
from mithril.models import MLP, Add, Conv2d, Flatten, Linear, MaxPool2D, Model, Relu

from mithril_backend_c import toolchain


def _mlp_reference(params: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    h = x
    names = sorted({k[len("weight") :] for k in params if k.startswith("weight")})
    for i, suffix in enumerate(names):
        h = h @ params[f"weight{suffix}"].T + params[f"bias{suffix}"]
        if i < len(names) - 1:
            h = np.maximum(h, 0)
    return h


def _cnn() -> Model:
    model = Model()
    model |= Conv2d(4, 3, padding=1)(input="input")
    model += Relu()
    model += MaxPool2D(kernel_size=2)
    model += Flatten()
    model += Linear(3)
    return model


def test_dynamic_shapes_are_refused_with_a_hint() -> None:
    with pytest.raises(ml.ShapeError, match=r"shapes="):
        ml.compile(Linear(3), ml.CBackend(threads=1))


def test_compiler_failure_reports_message_and_source_path() -> None:
    with pytest.raises(toolchain.CCompileError) as info:
        toolchain.build_library("int broken( { return 0; }\n")
    text = str(info.value)
    assert "error" in text and ".c" in text
    path = text.split("generated source ")[1].split()[0]
    assert Path(path).exists()


def test_cache_hit_and_source_is_c() -> None:
    backend = ml.CBackend(dtype=ml.float64, threads=1)
    pm = ml.compile(Add(), backend, shapes={"left": [16], "right": [16]})
    assert "mithril_evaluate" in pm.source and "#include" in pm.source
    path = pm.program.library_path
    assert path.exists() and pm.program.library_path == path


def test_two_identical_models_and_concurrent_threads() -> None:
    """No global state: identical sources share a library; threads calling both at once stay correct."""
    model = MLP(input_size=6, hidden_sizes=[16], output_size=3)
    backend = ml.CBackend(dtype=ml.float64, threads=2)
    first = ml.compile(model, backend, shapes={"input": [5, 6]})
    second = ml.compile(model, backend, shapes={"input": [5, 6]})
    params = first.randomize_params(seed=1)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((5, 6)) for _ in range(16)]

    def run(i: int) -> float:
        pm = (first, second)[i % 2]
        worst = 0.0
        for _ in range(50):
            got = pm.evaluate(params, {"input": inputs[i]})["output"]
            worst = max(worst, float(np.abs(got - _mlp_reference(params, inputs[i])).max()))
            _, grads = pm.evaluate(params, {"input": inputs[i]}, output_gradients={"output": np.ones((5, 3))})
            assert set(grads) == set(params)
        return worst

    with ThreadPoolExecutor(8) as pool:
        assert max(pool.map(run, range(16))) < 1e-10


@pytest.mark.parametrize("dtype", [ml.float32, ml.float64])
def test_mlp_example_trains(dtype) -> None:
    """The seeds' MLP: forward matches NumPy, a few SGD steps on squared error reduce the loss."""
    backend = ml.CBackend(dtype=dtype, threads=1)
    pm = ml.compile(MLP(input_size=4, hidden_sizes=[32], output_size=1), backend, shapes={"input": [64, 4]})
    params = pm.randomize_params(seed=0)
    rng = np.random.default_rng(0)
    x = backend.array(rng.standard_normal((64, 4)))
    y = np.sin(x.sum(axis=1, keepdims=True)).astype(x.dtype)
    tol = 1e-4 if dtype is ml.float32 else 1e-10
    np.testing.assert_allclose(
        pm.evaluate(params, {"input": x})["output"], _mlp_reference(params, x), atol=tol, rtol=tol
    )
    losses = []
    for _ in range(60):
        out = pm.evaluate(params, {"input": x})["output"]
        losses.append(float(np.mean((out - y) ** 2)))
        _, grads = pm.evaluate(
            params, {"input": x}, output_gradients={"output": (2 * (out - y) / len(x)).astype(x.dtype)}
        )
        params = {k: (v - 0.2 * grads[k]).astype(x.dtype) for k, v in params.items()}
    assert losses[-1] < 0.7 * losses[0]


def test_cnn_example_gradients_match_finite_differences() -> None:
    backend = ml.CBackend(dtype=ml.float64, threads=1)
    pm = ml.compile(_cnn(), backend, shapes={"input": [2, 2, 6, 6]})
    params = pm.randomize_params(seed=0)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 2, 6, 6))
    g = rng.standard_normal((2, 3))
    _, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": g})

    def objective(p):
        return float(np.sum(pm.evaluate(p, {"input": x})["output"] * g))

    for key, value in params.items():
        flat = value.reshape(-1)
        for i in rng.choice(flat.size, size=min(6, flat.size), replace=False):
            plus, minus = {**params, key: value.copy()}, {**params, key: value.copy()}
            plus[key].reshape(-1)[i] += 1e-6
            minus[key].reshape(-1)[i] -= 1e-6
            numeric = (objective(plus) - objective(minus)) / 2e-6
            assert abs(grads[key].reshape(-1)[i] - numeric) < 1e-6 * max(1, abs(numeric)), key


@pytest.mark.parametrize(("shape", "key"), [((), ()), ((3, 4), (1, 2)), ((3, 4), (-1, 0))])
def test_index_of_one_element_and_its_gradient(shape, key) -> None:
    """An index selecting one element (``x[()]`` of a 0-d ``x`` crashed the process: the view's offset
    was read from the address of NumPy's scalar copy) gives that element and its gradient."""
    from mithril.models import IOKey, Primitive

    model = Model()
    model |= Primitive("index", key=key)(input="x", output=IOKey("e", expose=False))
    model |= Primitive("multiply")(left="e", right="x", output=IOKey("y"))
    backend = ml.CBackend(dtype=ml.float64, threads=1)
    pm = ml.compile(model, backend, shapes={"x": list(shape)}, trainable_keys=["x"])
    x = np.arange(1.0, 1.0 + np.prod(shape, dtype=int)).reshape(shape)
    cotangent = np.full(shape, 0.5)
    outputs, grads = pm.evaluate({"x": x}, {}, output_gradients={"y": cotangent})
    np.testing.assert_array_equal(outputs["y"], x[key] * x)
    expected = np.asarray(cotangent * x[key])
    expected[key] += float(np.sum(cotangent * x))
    np.testing.assert_allclose(grads["x"], expected, rtol=1e-12)


def test_blocked_gemm_fallback_without_blas(tmp_path) -> None:
    """``MITHRIL_C_BLAS=none`` builds with the C GEMM; results match the BLAS build."""
    script = (
        "import numpy as np, mithril as ml\n"
        "from mithril_backend_c import toolchain\n"
        "assert toolchain.blas_info()['name'] == 'none'\n"
        "m = ml.models.Model(); m |= ml.models.Conv2d(5, 3, padding=1)(input='input')\n"
        "m += ml.models.Flatten(); m += ml.models.Linear(70)\n"
        "pm = ml.compile(m, ml.CBackend(dtype=ml.float64, threads=2), shapes={'input': [2, 3, 9, 9]})\n"
        "p = pm.randomize_params(seed=0); x = np.random.default_rng(0).standard_normal((2, 3, 9, 9))\n"
        "out, grads = pm.evaluate(p, {'input': x}, output_gradients={'output': np.ones((2, 70))})\n"
        "np.savez(r'%s', out=out['output'], **grads)\n" % (tmp_path / "none.npz")
    )
    env = {**os.environ, "MITHRIL_C_BLAS": "none", "MITHRIL_C_CACHE": str(tmp_path / "cache")}
    subprocess.run([sys.executable, "-c", script], check=True, env=env)
    fallback = np.load(tmp_path / "none.npz")
    m = Model()
    m |= Conv2d(5, 3, padding=1)(input="input")
    m += Flatten()
    m += Linear(70)
    pm = ml.compile(m, ml.CBackend(dtype=ml.float64, threads=2), shapes={"input": [2, 3, 9, 9]})
    p = pm.randomize_params(seed=0)
    x = np.random.default_rng(0).standard_normal((2, 3, 9, 9))
    out, grads = pm.evaluate(p, {"input": x}, output_gradients={"output": np.ones((2, 70))})
    np.testing.assert_allclose(fallback["out"], out["output"], rtol=1e-10, atol=1e-10)
    for key, value in grads.items():
        np.testing.assert_allclose(fallback[key], value, rtol=1e-9, atol=1e-10)


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")
@pytest.mark.parametrize("via", ["function", "method"])
def test_export_builds_and_reproduces_python(tmp_path, via) -> None:
    import mithril_backend_c

    backend = ml.CBackend(dtype=ml.float32, threads=1)
    pm = ml.compile(_cnn(), backend, shapes={"input": [2, 2, 6, 6]}, inference=True)
    params = pm.randomize_params(seed=3)
    x = np.random.default_rng(2).standard_normal((2, 2, 6, 6)).astype(np.float32)
    expected = pm.evaluate(params, {"input": x})["output"]
    out_dir = tmp_path / "model"
    if via == "function":
        mithril_backend_c.export(pm, out_dir, params)
    else:
        pm.export(out_dir, params)
    assert {p.name for p in out_dir.iterdir()} >= {"model.c", "model.h", "model.weights", "main.c", "BUILD"}
    build = (out_dir / "BUILD").read_text().split()
    assert build[:4] == ["cc", "-O3", "main.c", "model.c"]
    subprocess.run(
        [shutil.which("cc") or "gcc", *build[1:], "-o", "model"], cwd=out_dir, check=True, capture_output=True
    )
    x.tofile(out_dir / "input_input.bin")
    run = subprocess.run([str(out_dir / "model"), str(out_dir)], check=True, capture_output=True, text=True)
    assert "output:" in run.stdout
    got = np.fromfile(out_dir / "output_output.bin", dtype=np.float32).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    alternative = out_dir / "BUILD.scipy-openblas"
    assert alternative.exists() == (toolchain.blas_info()["name"] == "scipy-openblas")
    if alternative.exists():  # the same program linked against the wheel's OpenBLAS by absolute path
        assert "-lopenblas" not in build and "-DMT_USE_BLAS" not in build  # the default needs no Python package
        command = alternative.read_text().split()
        assert command[:4] == build[:4] and "-DMT_BLAS_SCIPY" in command
        subprocess.run([shutil.which("cc") or "gcc", *command[1:], "-o", "model_blas"], cwd=out_dir, check=True)
        subprocess.run([str(out_dir / "model_blas"), str(out_dir)], check=True, capture_output=True)
        got = np.fromfile(out_dir / "output_output.bin", dtype=np.float32).reshape(expected.shape)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def _gpt_like() -> Model:
    """Embedding, attention (its scale a folded constant), matmul, gelu, softmax."""
    from mithril.models import IOKey, Primitive

    model = Model()
    model |= Primitive("embedding")(input="tokens", weight="table", output=IOKey("h", expose=False))
    model |= Primitive("scaled_dot_product_attention", causal=True)(
        query="h", key="h", value="h", output=IOKey("a", expose=False)
    )
    model |= Primitive("matmul")(left="a", right="proj", output=IOKey("m", expose=False))
    model |= Primitive("gelu")(input="m", output=IOKey("g", expose=False))
    model |= Primitive("softmax", axis=-1)(input="g", output=IOKey("output"))
    return model


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
@pytest.mark.parametrize("openmp", [False, True])
@pytest.mark.parametrize("which", ["cnn", "mlp-gradients", "gpt-like"])
def test_exported_model_c_compiles_without_warnings(tmp_path, openmp, which) -> None:
    """The generated code (runtime inlined) has no warning under ``-Wall -Wextra``, with and without
    OpenMP: directives are ``MT_OMP(...)`` (nothing without OpenMP), no unused parameter or pointer."""
    backend = ml.CBackend(dtype=ml.float32, threads=1)
    if which == "cnn":
        pm = ml.compile(_cnn(), backend, shapes={"input": [2, 2, 6, 6]}, inference=True)
    elif which == "mlp-gradients":
        pm = ml.compile(MLP(input_size=4, hidden_sizes=[8], output_size=2), backend, shapes={"input": [3, 4]})
    else:
        shapes = {"tokens": [1, 5], "table": [11, 8], "proj": [8, 8]}
        pm = ml.compile(_gpt_like(), backend, shapes=shapes, data_keys={"tokens"}, inference=True)
    pm.export(tmp_path / "model", pm.randomize_params(seed=0))
    flags = ["-fopenmp"] if openmp else []
    result = subprocess.run(
        ["cc", "-O2", "-Wall", "-Wextra", "-Werror", *flags, "-c", "model.c", "-o", "model.o"],
        cwd=tmp_path / "model", capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    assert not re.search(r"^\s*#\s*pragma\s+omp", (tmp_path / "model" / "model.c").read_text(), re.M)


def test_scipy_openblas_is_preferred_and_runs_on_mithrils_threads() -> None:
    """The scipy-openblas32 wheel is the default BLAS. OpenBLAS runs single-threaded: the backend's
    ``threads`` OpenMP threads split each large GEMM (one thread pool for BLAS, convolutions and loops, so
    idle OpenBLAS workers never spin against them), and the result does not depend on the thread count."""
    import ctypes

    wheel = pytest.importorskip("scipy_openblas32")
    if os.environ.get("MITHRIL_C_BLAS"):
        pytest.skip("$MITHRIL_C_BLAS forces a BLAS")
    info = toolchain.blas_info()
    assert info["name"] == "scipy-openblas"
    assert "-lscipy_openblas" in info["libs"] and "-DMT_BLAS_SCIPY" in info["defines"]
    lib = ctypes.CDLL(str(Path(wheel.get_lib_dir()) / f"lib{wheel.get_library()}.so"))
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)  # 64x256x256: split over threads
    outputs = []
    for threads in (1, 2, 1):
        pm = ml.compile(
            MLP(input_size=256, hidden_sizes=[256], output_size=4),
            ml.CBackend(dtype=ml.float32, threads=threads),
            shapes={"input": [64, 256]},
        )
        params = pm.randomize_params(seed=0)
        outputs.append(pm.evaluate(params, {"input": x})["output"])
        np.testing.assert_allclose(outputs[-1], _mlp_reference(params, x), rtol=1e-4, atol=1e-5)
        assert lib.scipy_openblas_get_num_threads() == 1
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("choice", ["system", "scipy-openblas"])
def test_forced_blas_choice_matches_the_fallback(tmp_path, choice) -> None:
    """``MITHRIL_C_BLAS=system|scipy-openblas`` picks that BLAS (or the C GEMM when it is missing); the
    forward and gradients agree with the blocked C GEMM."""
    script = (
        "import numpy as np, mithril as ml, sys\n"
        "from mithril_backend_c import toolchain\n"
        "print(toolchain.blas_info()['name'])\n"
        "pm = ml.compile(ml.models.MLP(input_size=20, hidden_sizes=[33], output_size=7),\n"
        "                ml.CBackend(dtype=ml.float64, threads=2), shapes={'input': [9, 20]})\n"
        "p = pm.randomize_params(seed=0); x = np.random.default_rng(0).standard_normal((9, 20))\n"
        "out, grads = pm.evaluate(p, {'input': x}, output_gradients={'output': np.ones((9, 7))})\n"
        "np.savez(sys.argv[1], out=out['output'], **grads)\n"
    )
    results = {}
    for name in (choice, "none"):
        env = {**os.environ, "MITHRIL_C_BLAS": name, "MITHRIL_C_CACHE": str(tmp_path / "cache")}
        run = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / f"{name}.npz")],
            check=True,
            env=env,
            capture_output=True,
            text=True,
        )
        results[name] = (run.stdout.strip(), np.load(tmp_path / f"{name}.npz"))
    assert results["none"][0] == "none"
    assert (
        results[choice][0]
        in {"system": ("openblas", "blas", "none"), "scipy-openblas": ("scipy-openblas", "none")}[choice]
    )
    for key in results["none"][1].files:
        np.testing.assert_allclose(results[choice][1][key], results["none"][1][key], rtol=1e-9, atol=1e-10)


def test_mithril_export_cli_builds_a_program_that_reproduces_python(tmp_path, monkeypatch):
    """`mithril export module:builder DIR --shape ...` writes a program, example inputs and the expected sums."""
    from mithril.cli import main

    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    (tmp_path / "cli_model.py").write_text(
        "from mithril.models import MLP\n\n"
        "def build():\n    return MLP(input_size=4, hidden_sizes=[8], output_size=2)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "exported"
    assert main(["export", "cli_model:build", str(out), "--shape", "input=3,4"]) == 0
    for name in ("model.c", "model.h", "model.weights", "main.c", "BUILD", "input_input.bin", "expected_output.txt"):
        assert (out / name).exists(), name
    subprocess.run(["cc", "-O3", "main.c", "model.c", "-lm", "-o", "model"], cwd=out, check=True)
    printed = subprocess.run(["./model"], cwd=out, check=True, capture_output=True, text=True).stdout.split()
    expected = (out / "expected_output.txt").read_text().split()
    assert printed[:-1] == expected[:-1]  # "output: 6 values, sum"
    assert float(printed[-1]) == pytest.approx(float(expected[-1]), rel=1e-5, abs=1e-5)
