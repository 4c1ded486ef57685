"""An input passed again as the same array object takes the C caller's held-input fast path only while the
array still has the shape, dtype, strides and data address that were checked when it was attached: an array
changed in place behind Mithril's back (``x.shape = ...``, ``x.dtype = ...``, ``x.strides = ...``,
``x.resize(..., refcheck=False)``) gets the checked path's errors and conversions, never a stale address."""

from __future__ import annotations

import warnings

import mithril as ml
import numpy as np
import pytest
from mithril.errors import DtypeError, ShapeError
from mithril.models import IOKey, Linear, Model, Relu

BIG = (256, 1024)


@pytest.fixture(scope="module")
def pm():
    """Linear(3) on a [2, 4] input (params ``weight`` [3, 4], ``bias`` [3]) and ReLU of a [256, 1024] input."""
    model = Model()
    model |= Linear(3)(input="input", output=IOKey("output"))
    model |= Relu()(input="big", output=IOKey("big_out"))
    backend = ml.CBackend(dtype=ml.float32, threads=1)
    compiled = ml.compile(model, backend, shapes={"input": [2, 4], "big": list(BIG)}, data_keys={"input", "big"})
    assert compiled._direct_forward is not None  # evaluate takes the generated caller's own checks
    return compiled


@pytest.fixture
def arrays(pm):
    """Fresh arrays (owning their memory, so they can be resized) and the outputs of a first call (which
    attaches them: later calls with the same objects take the held-input fast path)."""
    rng = np.random.default_rng(0)
    params = {k: np.array(v, dtype=np.float32) for k, v in pm.randomize_params(seed=0).items()}
    data = {
        "input": rng.standard_normal((2, 4)).astype(np.float32),
        "big": rng.standard_normal(BIG).astype(np.float32),
    }
    first = pm.evaluate(params, data)
    np.testing.assert_allclose(first["output"], _linear(params, data["input"]), rtol=1e-5, atol=1e-6)
    return params, data


def _linear(params: dict, x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float64) @ params["weight"].T.astype(np.float64) + params["bias"]


def _assert_computes(pm, params: dict, data: dict) -> None:
    """``evaluate`` gives the Linear output of the current values (as NumPy reads the arrays now)."""
    out = pm.evaluate(params, data)["output"]
    np.testing.assert_allclose(out, _linear(params, data["input"]), rtol=1e-5, atol=1e-6)


def _checked(pm) -> int:
    return pm._forward.inputs_checked()  # type: ignore[no-any-return]


def _move(x: np.ndarray) -> None:
    """Resize ``x`` away and back to its shape so that its memory moves (its old block is freed): through a
    size above glibc's largest mmap threshold (32 MiB), which is always mapped apart from the heap."""
    shape, before = x.shape, x.ctypes.data
    x.resize(((64 << 20) // x.itemsize,), refcheck=False)
    x.resize(shape, refcheck=False)
    if x.ctypes.data == before:
        pytest.fail("the allocator did not move the resized array: this test cannot exercise a moved buffer")


def test_the_fast_path_engages_for_the_same_unchanged_arrays(pm, arrays) -> None:
    params, data = arrays
    checked = _checked(pm)
    outputs = [pm.evaluate(params, data)["output"] for _ in range(5)]
    assert _checked(pm) == checked  # nothing re-checked or re-attached
    for out in outputs:
        np.testing.assert_allclose(out, _linear(params, data["input"]), rtol=1e-5, atol=1e-6)
    pm.evaluate(params, {**data, "input": data["input"].copy()})  # a new object: checked and attached
    assert _checked(pm) == checked + 1


def test_refilled_arrays_are_read_fresh_params_included(pm, arrays) -> None:
    params, data = arrays
    checked = _checked(pm)
    data["input"][...] = np.arange(8, dtype=np.float32).reshape(2, 4)
    params["weight"][...] = np.ones((3, 4), np.float32)
    params["bias"][...] = np.array([1.0, 2.0, 3.0], np.float32)
    data["big"][...] = -1.0
    out = pm.evaluate(params, data)
    np.testing.assert_array_equal(out["output"], [[7.0, 8.0, 9.0], [23.0, 24.0, 25.0]])
    np.testing.assert_array_equal(out["big_out"], np.zeros(BIG, np.float32))
    assert _checked(pm) == checked  # the fast path, reading the new values at the same address


@pytest.mark.parametrize("group", ["data", "params"])
def test_a_reassigned_shape_raises_the_checked_paths_shape_error(pm, arrays, group) -> None:
    params, data = arrays
    key, x = ("input", data["input"]) if group == "data" else ("weight", params["weight"])
    expected = x.shape
    x.shape = expected[::-1]
    with pytest.raises(
        ShapeError,
        match=rf"evaluate\({group}\): '{key}' has shape \({expected[1]}, {expected[0]}\), "
        rf"expected \({expected[0]}, {expected[1]}\)",
    ):
        pm.evaluate(params, data)
    x.shape = expected  # back to the compiled shape: it computes again
    _assert_computes(pm, params, data)


def test_a_dtype_view_of_held_data_is_converted_like_a_fresh_array(pm, arrays) -> None:
    """``x.dtype = np.int32`` on float32 data: the checked path converts int data to the model's floats (the
    same result as a fresh int32 array); the C code never reads the int bits as floats."""
    params, data = arrays
    x = data["input"]
    x.dtype = np.int32
    out = pm.evaluate(params, data)["output"]
    np.testing.assert_array_equal(out, pm.evaluate(params, {**data, "input": x.copy()})["output"])
    np.testing.assert_allclose(out, _linear(params, x.astype(np.float64)), rtol=1e-5)


def test_a_dtype_view_of_a_held_param_raises_the_checked_paths_dtype_error(pm, arrays) -> None:
    params, data = arrays
    params["weight"].dtype = np.int32
    with pytest.raises(DtypeError, match=r"evaluate\(params\): 'weight' has dtype int32, expected float32"):
        pm.evaluate(params, data)


def test_a_resize_of_a_held_input_raises_and_never_reads_freed_memory(pm, arrays) -> None:
    params, data = arrays
    data["big"].resize((2,), refcheck=False)
    with pytest.raises(ShapeError, match=r"evaluate\(data\): 'big' has shape \(2,\), expected \(256, 1024\)"):
        pm.evaluate(params, data)


@pytest.mark.parametrize("group", ["data", "params"])
def test_a_held_input_resized_away_and_back_is_read_at_its_new_address(pm, arrays, group) -> None:
    """Same shape, dtype and strides as compiled, but the memory moved (the old block freed): the forward and
    the gradient entry points (each holds its own inputs) read the new memory."""
    params, data = arrays
    cotangent = {"output": np.ones((2, 3), np.float32)}
    pm.evaluate(params, data, output_gradients=cotangent)  # the gradient entry point holds them too
    x = data["input"] if group == "data" else params["weight"]
    _move(x)
    x[...] = np.arange(x.size, dtype=np.float32).reshape(x.shape)
    expected = _linear(params, data["input"])
    np.testing.assert_allclose(pm.evaluate(params, data)["output"], expected, rtol=1e-5, atol=1e-5)
    outputs, grads = pm.evaluate(params, data, output_gradients=cotangent)
    np.testing.assert_allclose(outputs["output"], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grads["weight"], np.ones((3, 2)) @ data["input"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("group", ["data", "params"])
def test_reassigned_strides_are_read_as_the_strided_view(pm, arrays, group) -> None:
    """``x.strides = ...`` (deprecated in NumPy 2.4, still allowed) makes a held input a non-contiguous view of
    the same memory: the checked path copies it to C order, so the C code reads the view's elements."""
    params, data = arrays
    x = data["input"] if group == "data" else params["weight"]
    contiguous = x.strides
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        x.strides = (x.itemsize, x.itemsize * x.shape[0])  # column-major reading of the same buffer
    assert not x.flags.c_contiguous
    _assert_computes(pm, params, data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        x.strides = contiguous
    _assert_computes(pm, params, data)


def test_a_misaligned_input_is_copied_to_aligned_memory_every_call(pm, arrays) -> None:
    """A float32 view at an odd address (``np.frombuffer(..., offset=1)``) is never handed to the C code as is:
    the checked path copies it (so it is never the held array, and each call checks it again)."""
    params, data = arrays
    raw = np.zeros(8 * 4 + 1, np.uint8)
    x = np.frombuffer(raw.data, np.float32, count=8, offset=1).reshape(2, 4)
    assert not x.flags.aligned and x.flags.c_contiguous
    raw[1:] = np.frombuffer(np.arange(8, dtype=np.float32).tobytes(), np.uint8)
    data["input"] = x
    checked = _checked(pm)
    _assert_computes(pm, params, data)
    _assert_computes(pm, params, data)
    assert _checked(pm) == checked + 2  # checked (and copied) on each call


@pytest.mark.parametrize("value", [None, "abc"])
def test_a_thread_whose_first_input_is_not_an_array_gets_the_checked_paths_error(pm, arrays, value) -> None:
    """A thread's struct started out holding ``None`` for every input, so a first call passing ``None`` looked
    held: it skipped ``attach`` and met ``x.shape`` (a raw ``AttributeError``) instead of the checks."""
    import threading

    params, data = arrays
    errors: list[BaseException] = []

    def first_call() -> None:
        try:
            pm.evaluate(params, {**data, "input": value})
        except BaseException as exc:  # handed to the main thread
            errors.append(exc)

    thread = threading.Thread(target=first_call)
    thread.start()
    thread.join()
    assert len(errors) == 1 and isinstance(errors[0], DtypeError), errors
    assert "'input'" in str(errors[0]) and "expected numbers" in str(errors[0])


@pytest.mark.parametrize("layout", ["struct field", "NumPy's report"])
def test_an_address_cell_follows_the_array_as_its_memory_moves(monkeypatch, layout) -> None:
    """``address_cell`` reads the data pointer from NumPy's struct where its offset is verified, and asks
    ``__array_interface__`` otherwise (both must see a resize move the memory)."""
    from mithril_backend_c import array_address

    if layout == "NumPy's report":
        monkeypatch.setattr(array_address, "data_field_offset", lambda: None)
    else:
        assert array_address.data_field_offset() is not None  # CPython: the fast cell is what callers use
    x = np.arange(16, dtype=np.float32)
    cell = array_address.address_cell(x)
    before = cell.value
    assert before == x.ctypes.data
    x.resize((1 << 20,), refcheck=False)
    occupier = np.empty(16, np.float32)  # takes the freed block, so shrinking back must move x again
    x.resize((16,), refcheck=False)
    assert cell.value == x.ctypes.data != before
    assert cell.value != occupier.ctypes.data
    assert array_address.address_cell(x[3:]).value == x.ctypes.data + 12

    class Sub(np.ndarray):
        pass

    with pytest.raises(TypeError, match=r"exact numpy\.ndarray objects, got Sub"):
        array_address.address_cell(x.view(Sub))


def test_the_fallback_cell_still_catches_a_moved_held_input(pm, monkeypatch) -> None:
    """With the struct offset unverified, arrays attached afterwards are checked through NumPy's report: a
    held input whose memory moved is attached again and read at its new address."""
    from mithril_backend_c import array_address

    monkeypatch.setattr(array_address, "data_field_offset", lambda: None)
    params = {k: np.array(v, dtype=np.float32) for k, v in pm.randomize_params(seed=1).items()}
    data = {"input": np.ones((2, 4), np.float32), "big": np.zeros(BIG, np.float32)}
    _assert_computes(pm, params, data)
    checked = _checked(pm)
    _assert_computes(pm, params, data)
    assert _checked(pm) == checked  # the fast path
    _move(data["input"])
    data["input"][...] = np.arange(8, dtype=np.float32).reshape(2, 4)
    _assert_computes(pm, params, data)
    assert _checked(pm) == checked + 1
