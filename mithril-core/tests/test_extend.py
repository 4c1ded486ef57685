"""``mithril.extend`` is enough to publish a primitive: a third-party package with one module and one
entry point (installed as a real distribution on ``sys.path``) adds a primitive, its NumPy implementation
and its gradient rule, found by the plugin manager like any installed plugin."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mithril.plugins.lookup import available_backends

PLUGIN = '''
"""A third-party Mithril plugin: the primitive ``sin_times_x`` = sin(x) * x."""
import numpy as np
from mithril.extend import PrimitiveSpec, hookimpl, rules


@hookimpl
def mithril_register_primitives(register):
    register(PrimitiveSpec("sin_times_x", ("input",), rules.same_shape, rules.float_result, doc="sin(x) * x"))


@hookimpl
def mithril_register_impls(register):
    register("numpy", {"sin_times_x": lambda input: np.sin(input) * input})


@hookimpl
def mithril_register_gradients(register):
    def sin_times_x(ctx):
        x = ctx["input"]
        return {"input": ctx.cotangent * (ctx.ops.sin(x) + x * ctx.ops.cos(x))}

    register("sin_times_x", sin_times_x)
'''

USER = """
import numpy as np
import mithril as ml
from mithril.models import Linear, Model, Primitive

model = Model()
model |= Linear(3)(input="input")
model += Primitive("sin_times_x")
pm = ml.compile(model, ml.NumpyBackend(dtype=ml.float64), shapes={"input": [2, 4]})
params = pm.randomize_params(seed=0)
x = np.linspace(-1, 1, 8).reshape(2, 4)
out, grads = pm.evaluate(params, {"input": x}, output_gradients={"output": np.ones((2, 3))})
z = x @ params["weight"].T + params["bias"]
np.testing.assert_allclose(out["output"], np.sin(z) * z, rtol=1e-12)
np.testing.assert_allclose(grads["bias"], (np.sin(z) + z * np.cos(z)).sum(0), rtol=1e-12)
print("plugin ok:", [p for p in ml.plugins.list() if "sin" in str(p)] or "loaded")
"""


def _install(site: Path) -> None:
    """Write the plugin as an installed distribution: its module plus a dist-info with the entry point."""
    (site / "sin_times_x_plugin.py").write_text(PLUGIN)
    info = site / "sin_times_x_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sin-times-x-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[mithril]\nsin_times_x = sin_times_x_plugin\n")


@pytest.mark.skipif("numpy" not in available_backends(), reason="the example plugin implements the NumPy backend")
def test_a_plugin_written_against_mithril_extend_is_loaded_from_its_entry_point(tmp_path: Path) -> None:
    _install(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n" + textwrap.dedent(USER)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "plugin ok" in result.stdout


def test_the_plugin_module_imports_only_the_documented_surface() -> None:
    imports = [line for line in PLUGIN.splitlines() if line.startswith(("import", "from"))]
    assert imports == ["import numpy as np", "from mithril.extend import PrimitiveSpec, hookimpl, rules"]


def test_extend_imports_no_backend_framework_and_no_test_runner() -> None:
    code = "import sys, mithril.extend; print(sorted(m for m in ('jax', 'torch', 'mlx', 'pytest') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"


def test_everything_extend_lists_exists() -> None:
    import mithril.extend as extend

    assert [name for name in extend.__all__ if not hasattr(extend, name)] == []
