"""Hardening, round 2 (issue 25): out-of-range indices are refused on every backend and dtype, however they
are given (JAX float32 computes in int32 and used to wrap ``2**32 + 3`` to the valid index 3), and the
parallel API refuses bad ``device_mesh``/``tensor_split`` values with an ``ArgumentError`` instead of raw
Python/JAX errors or silent truncation. Each test failed before the fix it guards."""

from __future__ import annotations

import functools
import importlib.util
import warnings
from pathlib import Path

import mithril as ml
import numpy as np
import pytest
from mithril.errors import ArgumentError, DtypeError, IndexRangeError
from mithril.models import CrossEntropy, Embedding, Primitive
from mithril.plugins.lookup import available_backends, backend_class
from mithril_testing.devices import run_torchrun, run_with_jax_devices

BAD_INDICES = [2**40, 2**32 + 3, -1, 2**31]
"""Beyond int32 (wrapping to 0 and 3), negative, and int32's overflow (wrapping to -2**31)."""


def _backend_dtypes() -> list:
    params = []
    for name in sorted(b for b in available_backends() if b != "*"):
        cls = backend_class(name)
        for dtype in (ml.float32, ml.float64):
            if dtype in cls.supported_dtypes:
                params.append(pytest.param(name, dtype, id=f"{name}-{dtype.name}"))
    return params


@functools.cache
def _compiled(name: str, dtype: ml.Dtype, what: str):
    backend = backend_class(name)(dtype=dtype)
    if what == "embedding":
        model, shapes = Embedding(num_embeddings=5, dim=3), {"input": [1, 4]}
    elif what == "cross_entropy":
        model, shapes = CrossEntropy(input_type="logits"), {"input": [4, 5], "target": [4]}
    else:
        model, shapes = Primitive("gather", axis=1), {"input": [2, 5], "index": [2, 4]}
    index_key = {"embedding": "input", "cross_entropy": "target", "gather": "index"}[what]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pm = ml.compile(model, backend, shapes=shapes, data_keys=set(shapes), jit=False)
    return backend, pm, pm.randomize_params(seed=0), shapes, index_key


def _data(shapes: dict, index_key: str, indices: object) -> dict:
    rng = np.random.default_rng(0)
    return {
        key: indices if key == index_key else rng.standard_normal(shape).astype(np.float32)
        for key, shape in shapes.items()
    }


def _bad(shape: list, value: int) -> np.ndarray:
    indices = np.zeros(shape, np.int64)
    indices.flat[2] = value
    return indices


@pytest.mark.parametrize("form", ["numpy int64", "list", "backend array"])
@pytest.mark.parametrize("value", BAD_INDICES)
@pytest.mark.parametrize(("name", "dtype"), _backend_dtypes())
def test_out_of_range_embedding_indices_are_refused(name: str, dtype: ml.Dtype, value: int, form: str) -> None:
    backend, pm, params, shapes, key = _compiled(name, dtype, "embedding")
    indices: object = _bad(shapes[key], value)
    if form == "list":
        indices = indices.tolist()  # type: ignore[union-attr]
    elif form == "backend array":
        try:
            indices = backend.array(indices)
        except DtypeError as exc:  # a backend computing in int32 cannot hold the value at all
            assert str(value) in str(exc) and "position (0, 2)" in str(exc) and "int32" in str(exc), exc
            return
    with pytest.raises(IndexRangeError) as caught:
        pm.evaluate(params, _data(shapes, key, indices))
    message = str(caught.value)
    assert f"'input' holds index {value} at position (0, 2)" in message, message
    assert "valid: 0 <= index < 5" in message, message


@pytest.mark.parametrize("what", ["cross_entropy", "gather"])
@pytest.mark.parametrize(("name", "dtype"), _backend_dtypes())
def test_out_of_range_targets_and_gather_indices_are_refused(name: str, dtype: ml.Dtype, what: str) -> None:
    _backend, pm, params, shapes, key = _compiled(name, dtype, what)
    position = r"\(2,\)" if what == "cross_entropy" else r"\(0, 2\)"
    for value in (2**32 + 3, 2**40):
        with pytest.raises(IndexRangeError, match=rf"'{key}' holds index {value} at position {position}, out of range"):
            pm.evaluate(params, _data(shapes, key, _bad(shapes[key], value)))


def test_jax_float32_arrays_refuse_integers_that_int32_would_wrap() -> None:
    if importlib.util.find_spec("mithril_backend_jax") is None:
        pytest.skip("JAX backend not installed")
    backend = ml.JaxBackend(dtype=ml.float32)
    with pytest.raises(
        DtypeError, match=r"JaxBackend computes these integers in int32: value 4294967299 at position \(1,\)"
    ):
        backend.array(np.array([0, 2**32 + 3]))
    assert backend.array(np.array([0, 2**31 - 1])).tolist() == [0, 2**31 - 1]


# -- 5. the parallel API's errors --------------------------------------------------------------------------
BAD_MESHES = ["abc", ((2,),), (2.5,), 2.0, True, (), (0,), (2, "a")]


@pytest.mark.parametrize("device_mesh", BAD_MESHES, ids=repr)
def test_torch_device_mesh_refuses_what_is_not_mesh_sizes(device_mesh: object) -> None:
    if importlib.util.find_spec("mithril_backend_torch") is None:
        pytest.skip("PyTorch backend not installed")
    with pytest.raises(
        ArgumentError, match=r"TorchBackend: device_mesh must be a positive int or a non-empty tuple of positive ints"
    ) as caught:
        ml.TorchBackend(device_mesh=device_mesh)
    assert f"got {device_mesh!r}" in str(caught.value)


@pytest.mark.slow
def test_jax_device_mesh_and_tensor_split_errors_on_four_devices() -> None:
    if importlib.util.find_spec("mithril_backend_jax") is None:
        pytest.skip("JAX backend not installed")
    found = run_with_jax_devices(
        f"""
        import mithril as ml
        from mithril.errors import ArgumentError

        def error(fn):
            try:
                fn()
            except Exception as exc:
                return [type(exc).__name__, str(exc)]
            return None

        meshes = {{repr(m): error(lambda m=m: ml.JaxBackend(device_mesh=m)) for m in {BAD_MESHES!r}}}
        backend = ml.JaxBackend(device_mesh=(2,))
        splits = {{
            repr(split): error(lambda split=split: backend.ones(3, 5, tensor_split=split))
            for split in [(-1,), (0,), (1,), 1.5, (0, 1), (2,)]
        }}
        splits["creator device_mesh"] = error(lambda: backend.ones(4, 4, device_mesh=(2.0,), tensor_split=(0,)))
        ok = [
            list(backend.ones(4, 6, tensor_split=(-1,)).sharding.shard_shape((4, 6))),
            list(backend.ones(4, 3, tensor_split=(0,)).sharding.shard_shape((4, 3))),
        ]
        emit({{"meshes": meshes, "splits": splits, "ok": ok}})
        """,
        devices=4,
    )
    for mesh, (kind, message) in found["meshes"].items():
        assert (
            kind == "ArgumentError" and "JaxBackend: device_mesh must be a positive int or a non-empty tuple" in message
        ), (mesh, message)
        assert f"got {mesh}" in message, message
    splits = found["splits"]
    for split, size, dim in (("(-1,)", 5, 1), ("(0,)", 3, 0), ("(1,)", 5, 1)):
        kind, message = splits[split]
        assert kind == "ArgumentError", (split, kind, message)
        assert (
            f"tensor_split={split} splits dimension {dim} of an array of shape (3, 5) over mesh axis mesh_0 (2 "
            f"devices), but {size} is not a multiple of 2" in message
        )
    assert splits["1.5"][0] == "ArgumentError" and "tensor_split must be a tuple" in splits["1.5"][1]
    assert splits["(0, 1)"][0] == "ArgumentError" and "names 2 mesh axes" in splits["(0, 1)"][1]
    assert splits["(2,)"][0] == "ArgumentError" and "is not a dimension of a 2-d array" in splits["(2,)"][1]
    assert splits["creator device_mesh"][0] == "ArgumentError" and "got (2.0,)" in splits["creator device_mesh"][1]
    assert found["ok"] == [[4, 3], [2, 3]]  # -1 is the last dimension; divisible splits still work


_TORCH_SPLIT_SCRIPT = """
import os, sys
import mithril as ml
from mithril.errors import ArgumentError
backend = ml.TorchBackend(device_mesh=(2,))
lines = []
try:
    backend.ones(3, 5, tensor_split=(0,))
except ArgumentError as exc:
    lines.append(f"refused: {exc}")
lines.append(f"local {tuple(backend.ones(4, 5, tensor_split=(0,)).to_local().shape)}")
with open(os.path.join(sys.argv[1], f"rank{os.environ['RANK']}.txt"), "w") as out:
    out.write("\\n".join(lines))
"""


@pytest.mark.slow
def test_torch_tensor_split_that_the_mesh_does_not_divide_is_refused(tmp_path: Path) -> None:
    """Before: DTensor split 3 rows over 2 processes unevenly (JAX refused with its own IndivisibleError)."""
    if importlib.util.find_spec("mithril_backend_torch") is None:
        pytest.skip("PyTorch backend not installed")
    script = tmp_path / "split.py"
    script.write_text(_TORCH_SPLIT_SCRIPT)
    done = run_torchrun(script, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    expected = (
        "refused: TorchBackend array creation: tensor_split=(0,) splits dimension 0 of an array of shape (3, 5) over "
        "mesh axis mesh_0 (2 devices), but 3 is not a multiple of 2"
    )
    for rank in range(2):
        lines = (tmp_path / f"rank{rank}.txt").read_text().splitlines()
        assert lines[0].startswith(expected) and lines[1] == "local (2, 5)", lines
