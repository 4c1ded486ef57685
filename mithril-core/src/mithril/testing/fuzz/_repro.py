"""Standalone pytest reproductions of a :class:`~mithril.testing.fuzz.Disagreement`.

The file holds plain Mithril code (``Model``, ``Primitive``, ``IOKey``, ``ml.compile``), the input values
and the expected numbers (reference outputs, finite-difference gradients) with the tolerances the fuzzer
used, so it runs without the fuzzer (only a variant with passes disabled imports
:func:`~mithril.testing.fuzz.passes_disabled`).

Example:
    >>> import numpy as np
    >>> from mithril.testing.fuzz import Recipe
    >>> r = Recipe()
    >>> x = r.add_input(np.array([1.0]), role="param")
    >>> (y,) = r.add_op("exp", {"input": x})
    >>> r.exposed.append(y)
    >>> "def test_" in reproduction_source(r, "numpy")
    True
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ._check import Disagreement, backend_dtype, tolerance_for
from ._oracle import Oracle
from ._passes import VARIANTS
from ._recipe import Recipe, array_literal, kind_of_array

__all__ = ["reproduction_source", "write_reproduction", "BACKEND_CLASSES"]

BACKEND_CLASSES = {
    "numpy": "NumpyBackend",
    "jax": "JaxBackend",
    "torch": "TorchBackend",
    "mlx": "MlxBackend",
    "c": "CBackend",
    "ggml": "GGMLBackend",
}
"""Backend name -> the ``ml.<Class>`` a reproduction constructs."""


def _full_gradient(oracle: Oracle, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-element finite differences of ``name`` and their error estimates (for the file)."""
    g = oracle.gradients[name]
    base = oracle.recipe.inputs[name].array
    if g.full is not None:
        errors = np.array([oracle.fd_error(name, i) for i in range(base.size)]).reshape(base.shape)
        return g.full, errors
    from ..conformance import FD_EPS

    full = np.zeros(base.shape)
    errors = np.zeros(base.shape)
    for flat in range(base.size):
        e = np.zeros(base.shape)
        e.flat[flat] = 1.0
        values = [oracle._difference(name, e, FD_EPS * k) for k in (1.0, 2.0, 4.0)]
        full.flat[flat] = values[0]
        errors.flat[flat] = max(abs(v - values[0]) for v in values[1:])
    return full, errors


def _dict_literal(items: dict[str, str], indent: int = 4) -> str:
    if not items:
        return "{}"
    pad = " " * indent
    return "{\n" + "".join(f'{pad}"{k}": {v},\n' for k, v in items.items()) + "}"


def reproduction_source(
    recipe: Recipe,
    backend: str,
    variant: str = "default",
    *,
    summary: str = "",
    xfail_reason: str | None = None,
    test_name: str = "test_reproduction",
    isolated: bool = False,
) -> str:
    """The text of a standalone pytest file checking ``recipe`` on ``backend`` against the oracle.

    Args:
        summary: the disagreement report, written into the module docstring.
        xfail_reason: when given, the test is marked ``xfail(strict=True, reason=...)`` (a known bug: the
            test fails until the bug is fixed, then XPASS tells to remove the mark).
        isolated: the test runs the model in a child process (for crashes and hangs).
    """
    oracle = Oracle.of(recipe)
    dtype = backend_dtype(backend)
    params, data = recipe.feeds()
    expected, tolerance = {}, {}
    for name, value in oracle.outputs.items():
        expected[name] = array_literal(value)
        if kind_of_array(value) == "float":
            rtol, atol, extra = tolerance_for(dtype, oracle.depth[name], oracle.noise.get(name, 0.0))
            scale = max(1.0, float(np.max(np.abs(value)))) if value.size else 1.0
            tolerance[name] = f"({rtol!r}, {atol * scale + extra!r})"
    grads, grad_tolerance = {}, {}
    if oracle.params and oracle.cotangents:
        depth = max(oracle.depth.values(), default=0)
        rtol, atol, _ = tolerance_for(dtype, depth, 0.0, gradient=True, amplification=oracle.amplification())
        for name in oracle.gradients:
            full, errors = _full_gradient(oracle, name)
            scale = max(1.0, float(np.max(np.abs(full)))) if full.size else 1.0
            grads[name] = array_literal(full)
            grad_tolerance[name] = f"({rtol!r}, {atol * scale + 4 * float(np.max(errors, initial=0.0))!r})"
    compile_kwargs = ", ".join(f"{k}={v}" for k, v in recipe.compile_kwargs_source().items())
    disabled = VARIANTS[variant]
    docstring = summary.strip() or f"{backend}: compare with the NumPy references"
    docstring = docstring.replace("\\", "\\\\").replace('"""', "'''")
    mark = f"@pytest.mark.xfail(strict=True, reason={xfail_reason!r})\n" if xfail_reason else ""
    imports = "from mithril.testing.fuzz import passes_disabled\n" if disabled else ""
    compile_line = f"pm = ml.compile(build_model(), backend{', ' + compile_kwargs if compile_kwargs else ''})"
    if disabled:
        compile_block = f"    with passes_disabled({', '.join(repr(p) for p in disabled)}):\n        {compile_line}\n"
    else:
        compile_block = f"    {compile_line}\n"
    dtype_name = f"ml.{dtype.value}"
    if isolated:  # the bug kills or hangs the interpreter: run the model in a child process
        test_body = (
            "    result = subprocess.run([sys.executable, __file__], capture_output=True, text=True, timeout=600)\n"
            "    assert result.returncode == 0, f\"exit status {result.returncode}\\n{result.stdout}{result.stderr}\""
        )
    else:
        test_body = "    _run()"
    source = f'''"""Fuzz reproduction ({backend}, {dtype.value}, variant {variant!r}).

{docstring}

Generated by ``mithril.testing.fuzz``: the model is plain Mithril code; expected outputs come from the
plain-NumPy references in float64, expected gradients from float64 central finite differences of
sum(cotangent * output); TOLERANCE gives (rtol, absolute atol) per key.
"""

{"import subprocess" + chr(10) + "import sys" + chr(10) + chr(10) if isolated else ""}import mithril as ml
import numpy as np
import pytest
from mithril.models import IOKey, Model, Primitive
from mithril.testing.fuzz.replay import check_reproduction
{imports}

{recipe.model_source()}

PARAMS = {_dict_literal({k: array_literal(v) for k, v in params.items()})}
DATA = {_dict_literal({k: array_literal(v) for k, v in data.items()})}
EXPECTED = {_dict_literal(expected)}
TOLERANCE = {_dict_literal(tolerance)}
COTANGENTS = {_dict_literal({k: array_literal(v) for k, v in oracle.cotangents.items()} if grads else {})}
EXPECTED_GRADIENTS = {_dict_literal(grads)}
GRADIENT_TOLERANCE = {_dict_literal(grad_tolerance)}

pytestmark = pytest.mark.fuzz


def _run():
    backend = ml.{BACKEND_CLASSES.get(backend, backend)}(dtype={dtype_name})
{compile_block}    check_reproduction(
        backend, pm, PARAMS, DATA, EXPECTED, TOLERANCE, COTANGENTS, EXPECTED_GRADIENTS, GRADIENT_TOLERANCE
    )


{mark}def {test_name}():
    pytest.importorskip("mithril_backend_{backend}", reason="the {backend} backend is not installed")
{test_body}


if __name__ == "__main__":
    _run()
'''
    return re.sub(r"\n{3,}(?=def build_model)", "\n\n\n", source)


def write_reproduction(disagreement: Disagreement, directory: str | Path, *, xfail_reason: str | None = None) -> Path:
    """Write ``test_<backend>_<category>_<fingerprint>.py`` into ``directory``; returns its path.

    >>> from pathlib import Path
    >>> write_reproduction  # doctest: +ELLIPSIS
    <function write_reproduction at ...>
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "_", disagreement.category.lower()).strip("_")
    name = f"test_{disagreement.backend}_{slug}_{disagreement.recipe.fingerprint()[:10]}"
    path = directory / f"{name}.py"
    path.write_text(
        reproduction_source(
            disagreement.recipe,
            disagreement.backend,
            disagreement.variant,
            summary=disagreement.report(),
            xfail_reason=xfail_reason,
            test_name=name,
            isolated=disagreement.category.split(":")[-1] in ("crash", "hang"),
        )
    )
    return path

