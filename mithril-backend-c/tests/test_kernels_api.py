"""The public kernel API (``mithril_backend_c.kernels``): what GGML and mithril-models use of the C backend."""

from __future__ import annotations

import shutil
from typing import Any

import mithril as ml
import numpy as np
import pytest
from mithril.errors import ArgumentError, IndexRangeError
from mithril.models import Add, IOKey, Linear, Model, Relu

from mithril_backend_c import CBackend, NativeMemoryError, kernels

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="needs a C compiler")


class _Recording(CBackend):
    """A C backend that keeps the graph and functions it generated code for."""

    def generate_program(self, graph: Any, functions: Any, **options: Any) -> Any:
        self.compiled = (graph, functions)
        return super().generate_program(graph, functions, **options)


def _mlp() -> Model:
    model = Model()
    model |= Linear(8)(input="input", output="h")
    model += Relu()(output=IOKey("output"))
    return model


def test_a_node_compiles_to_a_kernel_that_computes_it() -> None:
    backend = _Recording(threads=1)
    ml.compile(_mlp(), backend, shapes={"input": [2, 4]}, data_keys={"input"}, inference=True)
    graph, _ = backend.compiled
    relu = next(n for n in graph.nodes if n.spec.name == "relu")
    kernel = kernels.kernel_source([relu], [relu.inputs["input"]], [relu.output], prefix="t0", header="relu */")
    assert kernel.function.symbol == "t0_kernel" and [f.name for f in kernel.function.inputs] == ["in_x0"]
    assert "#include" not in kernel.text and "relu * /" in kernel.text  # no includes; the header escaped
    library = kernels.build_library("\n".join([*kernels.INCLUDES, kernel.text]))
    call = kernels.load_functions(library, [kernel.function], backend)["kernel"]
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    np.testing.assert_array_equal(call({}, {"x0": x})["y0"], np.maximum(x, 0))
    split = kernels.kernel_source([relu], [relu.inputs["input"]], [relu.output], prefix="t1", partitioned=True)
    assert "long mt_part, long mt_nparts" in split.text


def test_fusion_plan_groups_an_elementwise_chain() -> None:
    backend = _Recording(threads=1)
    model = Model()
    model |= Add()(left="a", right="b", output="s")
    model |= Relu()(input="s", output=IOKey("output"))
    ml.compile(model, backend, shapes={"a": [4], "b": [4]}, data_keys={"a", "b"}, inference=True)
    graph, (fn,) = backend.compiled
    units = kernels.plan_fusion(graph.nodes, {v.id for v in fn.returns[0].values()})
    assert [[n.spec.name for n in u.nodes] for u in units] == [["add", "relu"]] and units[0].fused
    assert {"add", "relu"} <= kernels.ELEMENTWISE_PRIMITIVES and "reshape" in kernels.ALIAS_PRIMITIVES


def test_programs_merge_into_one_standalone_source_with_renamed_entry_points() -> None:
    backend = ml.CBackend(threads=1)
    pms = [ml.compile(Add(), backend, shapes={"left": [n], "right": [n]}, inference=True) for n in (4, 8)]
    sources = []
    for n, pm in zip((4, 8), pms, strict=True):
        code, (function,) = kernels.compiled_source(pm)
        sources.append(code.renamed({function.name: f"slots{n}_evaluate"}))
    merged = kernels.merge_sources(sources)
    functions = [entry.function for entry in merged.entries]
    assert [f.symbol for f in functions] == ["mithril_slots4_evaluate", "mithril_slots8_evaluate"]
    model_c, model_h = kernels.standalone_source(merged), kernels.model_header(functions)
    assert '#include "runtime.h"' not in model_c and "void mt_blas_serial(void)" in model_c
    assert "int mithril_slots8_evaluate(const mithril_slots8_evaluate_args *a, int nt) {" in model_c
    assert "mithril_evaluate" not in model_c and "int mithril_slots4_evaluate(const" in model_h
    with pytest.raises(ArgumentError, match=r"compiled_source needs a model compiled with ml.CBackend\(\)"):
        kernels.compiled_source(object())


def test_status_codes_become_mithril_errors() -> None:
    assert isinstance(kernels.status_error("f", kernels.MT_ERR_ALLOC, [0, 0, 0], workspace=64), NativeMemoryError)
    error = kernels.status_error("f", kernels.MT_ERR_INDEX, [0, 7, 1])
    assert isinstance(error, IndexRangeError) and "index 7 at position 1" in str(error)
    assert isinstance(kernels.status_error("f", 9, [0, 0, 0]), kernels.NativeError)
