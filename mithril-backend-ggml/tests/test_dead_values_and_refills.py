"""Results that depended on ggml's thread timing (issue 25, "Silent wrong answers"):

- gradients of models with intermediate values that feed no output came out wrong on most compiles (a
  broadcast parameter's gradient off by 0.04, sometimes 1e31);
- evaluating again after writing new values into the same arrays (``x[...] = new``) could return a
  result computed partly from the old values.

Both were one bug: a fused elementwise group run as one split C kernel (every ggml thread computes a part)
was generated as several loops one after another, and a part of a later loop read the values that
another thread's part of an earlier loop had not written yet (uninitialised memory on a fresh compile, the
previous call's values afterwards). Thread timing decides whether it shows, so the deterministic tests run
every split kernel's parts one after another, last part first, on a result filled with NaN
(:func:`_split_kernel_parts_serially`): independent parts give the same numbers in any order.
"""

from __future__ import annotations

import contextlib
import ctypes
import random
from collections.abc import Callable, Iterator
from typing import Any

import mithril as ml
import numpy as np
import pytest
from mithril.extend import available_backends, backend_class
from mithril.models import Embedding, Linear, Model, Multiply, Subtract, Tanh

from mithril_backend_ggml._ckernels import _slot_ffi
from mithril_backend_ggml._lib import load_ggml

THREADS = 2
ATOL = RTOL = 2e-4  # float32 results against NumPy in float64
SHAPES = {"a": [3, 4], "b": [3, 4], "c": [1, 4], "d": [3, 1]}
PARAMS = ("a", "c")

_KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p)


def _tanh_of(model: Model, key: str) -> Any:
    """Add ``Tanh`` of the input ``key`` to ``model``; its output connection."""
    block = Tanh()
    model |= block(input=key)
    return block.output


def _issue_model() -> Model:
    """The model of issue 25: v4, v7, v8 and v9 feed no output; ``c`` ([1, 4]) is broadcast."""
    m = Model()
    v0, v1, v2, v3 = (_tanh_of(m, key) for key in "abcd")
    v4 = v1 * v0
    v5 = v1 * v2
    v6 = v5 / (v3 * v3 + 1.0)
    v7 = v4 * v1  # noqa: F841 - dead on purpose
    v8 = v2.max(axis=1, keepdim=True)  # noqa: F841
    v9 = v1 + v0  # noqa: F841
    m |= Tanh()(input=v6.sigmoid() * 1.0 + 0.0, output="out0")
    m |= Tanh()(input=v5 * 1.0 + 0.0, output="out1")
    return m


_BINARY: list[Callable[[Any, Any], Any]] = [
    lambda x, y: x * y,
    lambda x, y: x + y,
    lambda x, y: x - y,
    lambda x, y: x / (y * y + 1.0),
]


def _dead_value_model(seed: int) -> tuple[Model, dict[str, tuple[int, ...]]]:
    """A random elementwise model over the inputs of :data:`SHAPES` (broadcast shapes) whose values mostly
    feed no output, and the shapes of its two outputs ``out0``, ``out1``."""
    rng = random.Random(seed)
    model = Model()
    pool: list[tuple[Any, tuple[int, ...]]] = []
    for key, shape in SHAPES.items():
        t = Tanh()
        model |= t(input=key)
        pool.append((t.output, tuple(shape)))
    for _ in range(12):
        (x, sx) = pool[-1] if rng.random() < 0.5 else rng.choice(pool)  # chains, and values left behind
        (y, sy) = rng.choice(pool if rng.random() < 0.5 else pool[2:4])  # often a broadcast input
        roll = rng.random()
        if roll < 0.65:
            pool.append((rng.choice(_BINARY)(x, y), tuple(np.broadcast_shapes(sx, sy))))
        elif roll < 0.85:
            pool.append((x.sigmoid() if rng.random() < 0.5 else x.tanh(), sx))
        else:
            axis = rng.choice([i for i, n in enumerate(sx) if n > 1] or [0])
            reduced = x.max(axis=axis, keepdim=True) if rng.random() < 0.5 else x.sum(axis=axis, keepdim=True)
            pool.append((reduced, tuple(1 if i == axis else n for i, n in enumerate(sx))))
    shapes = {}
    for i, (value, shape) in enumerate(rng.sample(pool[4:], 2)):
        model |= Tanh()(input=value * 1.0 + 0.0, output=f"out{i}")
        shapes[f"out{i}"] = shape
    return model, shapes


def _inputs(seed: int, out_shapes: dict[str, tuple[int, ...]]) -> tuple[dict, dict, dict]:
    rng = np.random.default_rng(seed)
    params = {k: rng.standard_normal(SHAPES[k]).astype(np.float32) for k in PARAMS}
    data = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items() if k not in PARAMS}
    cotangents = {k: rng.standard_normal(s).astype(np.float32) for k, s in out_shapes.items()}
    return params, data, cotangents


def _evaluate(pm: Any, params: dict, data: dict, cotangents: dict) -> dict[str, np.ndarray]:
    """Outputs and gradients (``grad:<key>``) as float64 NumPy arrays."""
    outputs, grads = pm.evaluate(params, data, output_gradients=cotangents)
    host = lambda v: np.asarray(pm.backend.to_numpy(v), np.float64)  # noqa: E731
    return {**{k: host(v) for k, v in outputs.items()}, **{f"grad:{k}": host(v) for k, v in grads.items()}}


def _reference(
    model: Model, params: dict, data: dict, cotangents: dict, shapes: dict = SHAPES
) -> dict[str, np.ndarray]:
    """Outputs and gradients of NumPy in float64 (integer data stays integer)."""
    pytest.importorskip("mithril_backend_numpy", reason="the NumPy backend computes the reference")
    backend = ml.NumpyBackend(dtype=ml.float64)
    pm = ml.compile(model, backend, shapes=shapes, trainable_keys=set(params), data_keys=set(data), jit=False)
    as64 = lambda group: {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in group.items()}  # noqa: E731
    return _evaluate(pm, as64(params), as64(data), as64(cotangents))


def _assert_close(got: dict[str, np.ndarray], expected: dict[str, np.ndarray], what: str) -> None:
    assert sorted(got) == sorted(expected), what
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], rtol=RTOL, atol=ATOL, err_msg=f"{what}: {key}")


def _compile_ggml(model: Model, threads: int = THREADS) -> Any:
    return ml.compile(model, ml.GGMLBackend(threads=threads), shapes=SHAPES, trainable_keys=set(PARAMS), jit=False)


def _fill_compute_buffers(pm: Any, byte: int = 0xFF) -> None:
    """Fill every ggml compute buffer of ``pm`` with ``byte`` (0xFF: every float is NaN), so a value read
    before anything wrote it shows in the result instead of whatever the allocation held."""
    ggml = load_ggml()
    for f in pm.program.functions.values():
        for i in range(ggml.ggml_graph_n_nodes(f.gf)):
            buffer = ggml.ggml_graph_node(f.gf, i).contents.buffer
            if buffer:
                ggml.ggml_backend_buffer_clear(buffer, byte)
                break


@contextlib.contextmanager
def _split_kernel_parts_serially(pm: Any) -> Iterator[list[str]]:
    """While active, every split C kernel of ``pm`` (a custom op each ggml thread computes a part of) runs
    all its parts, one after another and last part first, on the thread that computes part 0, after
    filling its result (and scratch space) with NaN; the other threads return at once. Parts that
    do not read each other's results give the threaded numbers; a part that reads what another part
    writes reads NaN. Yields the kernels' symbols."""
    ggml = load_ggml()
    ffi = _slot_ffi()
    saved, wrappers, symbols = [], [], []
    for slot, symbol in pm.program.ckernels.slots:
        if not symbol.endswith("_part"):  # the symbol of every split kernel (CKernels.partitioned)
            continue
        kernel = _KERNEL(int(ffi.cast("uintptr_t", slot.fn)))

        def serial(dst: int, ith: int, nth: int, userdata: int, kernel: Any = kernel) -> None:
            if ith != 0:
                return
            tensor = ctypes.cast(dst, ctypes.POINTER(ggml.ggml_tensor))
            ctypes.memset(tensor.contents.data, 0xFF, ggml.ggml_nbytes(tensor))
            for part in reversed(range(nth)):
                kernel(dst, part, nth, userdata)

        wrapper = _KERNEL(serial)
        saved.append((slot, slot.fn))
        wrappers.append(wrapper)
        symbols.append(symbol)
        slot.fn = ffi.cast("void *", ctypes.cast(wrapper, ctypes.c_void_p).value)
    try:
        yield symbols
    finally:
        for slot, fn in saved:
            slot.fn = fn


# -- item 1: dead intermediate values --------------------------------------------------------------------------


def test_issue_model_gradients_with_split_kernel_parts_run_one_after_another():
    """Deterministic: every split kernel's parts run serially (last first) on NaN-filled results."""
    model = _issue_model()
    params, data, cotangents = _inputs(0, {"out0": (3, 4), "out1": (3, 4)})
    expected = _reference(model, params, data, cotangents)
    pm = _compile_ggml(model)
    with _split_kernel_parts_serially(pm) as symbols:
        got = _evaluate(pm, params, data, cotangents)
    assert symbols, pm.source  # the model has split kernels (fused elementwise chains)
    _assert_close(got, expected, "serial parts")
    _assert_close(_evaluate(pm, params, data, cotangents), expected, "threaded, after the serial run")


def test_issue_model_first_compute_of_every_compile_matches_numpy():
    """The reported symptom, threaded as users run it: the first compute of each fresh compile, its
    compute buffer filled with NaN first (so a read of memory nobody wrote cannot go unnoticed)."""
    model = _issue_model()
    params, data, cotangents = _inputs(0, {"out0": (3, 4), "out1": (3, 4)})
    expected = _reference(model, params, data, cotangents)
    for attempt in range(8):
        pm = _compile_ggml(model)
        _fill_compute_buffers(pm)
        _assert_close(_evaluate(pm, params, data, cotangents), expected, f"compile {attempt}")


class _RecordingGGML(ml.GGMLBackend):
    """The GGML backend, keeping the optimised graph and functions it compiled last."""

    def generate_program(self, graph: Any, functions: Any, **options: Any) -> Any:
        self.compiled = (graph, functions)
        return super().generate_program(graph, functions, **options)


def test_a_group_its_own_plan_splits_is_never_one_split_kernel():
    """The C code generator refuses a split kernel of several loops (``NotPartitionable``; the builder
    then keeps the group unfused), and the GGML program fuses such a group as the groups its kernel plan
    makes: here the 14-node gradient group of the issue model, whose kernel planned three loops."""
    from mithril.extend import live_nodes
    from mithril_backend_c.kernels import plan_fusion

    from mithril_backend_ggml._ckernels import CKernels, c_emitters

    backend = _RecordingGGML(threads=THREADS)
    pm = ml.compile(_issue_model(), backend, shapes=SHAPES, trainable_keys=set(PARAMS), jit=False)
    graph, functions = backend.compiled
    targets = [v for group in functions[-1].returns for v in group.values()]  # evaluate_gradients
    nodes = live_nodes(graph.nodes, targets)
    planned = plan_fusion(nodes, {v.id for v in targets}, emitters=c_emitters(), single_output=True)
    groups = [u for u in planned if u.fused]
    split = [u for u in groups if len(plan_fusion(u.nodes, {v.id for v in u.stored}, emitters=c_emitters())) > 1]
    assert [len(u.nodes) for u in split] == [14]
    sources = [v for v in split[0].inputs if not (v.is_constant and v.producer is None)]
    assert CKernels(THREADS).partitioned(split[0].nodes, sources, split[0].stored[0]) is None
    gradients = pm.source.split("def evaluate_gradients")[1]
    assert "fused[multiply, subtract, multiply, multiply, multiply](" in gradients, gradients
    assert "fused[subtract, multiply, divide](" in gradients, gradients


# seeds 2, 57, 63 and 86 gave wrong gradients before the fix (their split kernels' parts read each other's values)
@pytest.mark.parametrize("seed", [2, 57, 63, 86, 0, 1, 3, 4])
def test_random_dead_value_models_match_numpy_over_repeated_compiles(seed):
    model, out_shapes = _dead_value_model(seed)
    params, data, cotangents = _inputs(seed, out_shapes)
    expected = _reference(model, params, data, cotangents)
    for attempt in range(3):
        pm = _compile_ggml(model)
        _fill_compute_buffers(pm)
        with _split_kernel_parts_serially(pm):
            _assert_close(_evaluate(pm, params, data, cotangents), expected, f"compile {attempt}, serial parts")
        _fill_compute_buffers(pm)
        _assert_close(_evaluate(pm, params, data, cotangents), expected, f"compile {attempt}, threaded")


# -- item 2: arrays refilled in place between calls ------------------------------------------------------------


def _embedding_model() -> Model:
    """Integer indices (``Embedding``) and a broadcast float data input."""
    model = Model()
    embedding, linear = Embedding(10, 4), Linear(3)
    model |= embedding(input="ids")
    model |= linear(input=embedding.output)
    model |= Multiply()(left=linear.output, right="s", output="out")
    return model


def _two_keys_model() -> Model:
    """``x`` and ``y`` are given the same array object; ``w`` ([1, 4]) is a broadcast parameter."""
    model = Model()
    product, difference = Multiply(), Subtract()
    model |= product(left="x", right="y")
    model |= difference(left="x", right="w")
    model |= Multiply()(left=product.output, right=difference.output, output="out")
    return model


# name: (builder, shapes, parameter keys, integer data {key: high}, keys given the first key's array object)
REFILL_CASES: dict[str, tuple[Callable[[], Model], dict, tuple[str, ...], dict[str, int], tuple[str, ...]]] = {
    "dead_values": (_issue_model, SHAPES, PARAMS, {}, ()),
    "embedding": (_embedding_model, {"ids": [2, 3], "s": [1, 3]}, ("weight", "weight_1", "bias"), {"ids": 10}, ()),
    "same_array_two_keys": (_two_keys_model, {"x": [3, 4], "y": [3, 4], "w": [1, 4]}, ("w",), {}, ("x", "y")),
}


def _case_values(name: str, seed: int) -> tuple[dict, dict, dict]:
    """Parameters, data and cotangents of a refill case (NumPy arrays; the shared keys hold one object)."""
    pytest.importorskip("mithril_backend_numpy", reason="the NumPy backend gives the parameter shapes")
    build, shapes, param_keys, ints, shared = REFILL_CASES[name]
    rng = np.random.default_rng(seed)
    pm = ml.compile(build(), ml.NumpyBackend(), shapes=shapes, trainable_keys=set(param_keys), jit=False)
    param_shapes = {k: np.shape(v) for k, v in pm.randomize_params(seed=0).items()}
    params = {k: rng.standard_normal(param_shapes[k]).astype(np.float32) for k in param_keys}
    data = {}
    for key, shape in shapes.items():
        if key in params or (shared and key in shared[1:]):
            continue
        high = ints.get(key)
        data[key] = rng.integers(0, high, shape) if high else rng.standard_normal(shape).astype(np.float32)
    for key in shared[1:]:
        data[key] = data[shared[0]]
    outputs = pm.evaluate(params, data)
    cotangents = {k: rng.standard_normal(np.shape(v)).astype(np.float32) for k, v in outputs.items()}
    return params, data, cotangents


def _to_backend(backend: Any, group: dict) -> dict:
    """``group`` as the backend's arrays, one array object per NumPy object (shared keys stay shared)."""
    made: dict[int, Any] = {}
    for value in group.values():
        if id(value) not in made:
            made[id(value)] = backend.array(value) if value.dtype.kind == "f" else backend.array(value, "int")
    return {k: made[id(v)] for k, v in group.items()}


def _refill(backend: Any, group: dict, new: dict) -> dict:
    """Write ``new``'s values into ``group``'s arrays themselves (each object once). JAX arrays cannot
    change: there the group is made again from ``new`` (new objects, the shared keys still one)."""
    if backend.backend_type == "jax":
        return _to_backend(backend, new)
    done: set[int] = set()
    for key, array in group.items():
        if id(array) in done:
            continue
        done.add(id(array))
        values = new[key]
        if isinstance(array, np.ndarray):
            array[...] = values
        elif backend.backend_type == "torch":
            array.copy_(backend.array(values) if values.dtype.kind == "f" else backend.array(values, "int"))
        else:  # mlx
            array[...] = backend.array(values) if values.dtype.kind == "f" else backend.array(values, "int")
    return group


@pytest.mark.parametrize("case", sorted(REFILL_CASES))
@pytest.mark.parametrize("backend_name", available_backends())
def test_arrays_refilled_in_place_between_calls_give_the_new_results(backend_name, case):
    """``evaluate``, write new values into the same arrays (params, data, cotangents), ``evaluate``
    again: outputs and gradients are those of a fresh NumPy evaluation of the new values."""
    build, shapes, param_keys, _, _ = REFILL_CASES[case]
    kwargs = {"threads": THREADS} if backend_name == "ggml" else {}
    backend = backend_class(backend_name)(**kwargs)
    old, new = _case_values(case, 1), _case_values(case, 2)
    pm = ml.compile(build(), backend, shapes=shapes, trainable_keys=set(param_keys), data_keys=set(old[1]))
    groups = [_to_backend(backend, group) for group in old]
    _assert_close(_evaluate(pm, *groups), _reference(build(), *old, shapes=shapes), "first call")
    groups = [_refill(backend, group, values) for group, values in zip(groups, new, strict=True)]
    _assert_close(_evaluate(pm, *groups), _reference(build(), *new, shapes=shapes), "after the refill")
