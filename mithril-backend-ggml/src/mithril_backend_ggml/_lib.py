"""Loading libggml through the ``ggml-python`` bindings, with a version check.

``ggml-python`` builds libggml (plus its CPU backend) and loads it with ctypes. The backend builds its
graphs through those bindings directly, so the process holds exactly one copy of libggml: the one under
the ``ggml`` package's ``lib/`` folder. No C is generated.

Example:
    >>> from mithril_backend_ggml._lib import load_ggml
    >>> load_ggml().ggml_version()           # doctest: +SKIP
    b'0.15.3'
"""

from __future__ import annotations

import functools
from types import ModuleType

__all__ = ["REQUIRED_GGML_PYTHON", "REQUIRED_GGML_VERSION", "ggml_versions", "load_ggml"]

REQUIRED_GGML_VERSION = "0.15.3"
"""The libggml version whose C API (struct layouts, op signatures) the builders are written against."""
REQUIRED_GGML_PYTHON = "0.0.45"
"""The ``ggml-python`` release that ships that libggml."""


@functools.cache
def load_ggml() -> ModuleType:
    """Import the ``ggml`` bindings (loading libggml once) and check the library version."""
    try:  # on first use: loading libggml takes time, and a missing or wrong ggml-python gets the fix named
        import ggml
    except ImportError as exc:
        raise ImportError(
            f"the GGML backend needs libggml from the 'ggml-python' package ({exc}); "
            f'install it with: pip install "ggml-python=={REQUIRED_GGML_PYTHON}"'
        ) from exc
    found = ggml.ggml_version().decode()
    if found != REQUIRED_GGML_VERSION:
        raise ImportError(
            f"the GGML backend requires libggml {REQUIRED_GGML_VERSION} (ggml-python {REQUIRED_GGML_PYTHON}); "
            f"the installed ggml-python {getattr(ggml, '__version__', '?')} loads libggml {found}. "
            f'Fix: pip install "ggml-python=={REQUIRED_GGML_PYTHON}"'
        )
    return ggml


def ggml_versions() -> dict[str, str]:
    """``{"ggml": libggml version, "commit": its commit, "ggml-python": bindings version, "llamafile": "on" |
    "off"}``: the last, whether libggml was built with llamafile's matrix-product kernels
    (``CMAKE_ARGS="-DGGML_LLAMAFILE=ON"``, as ``make install`` builds it; without them F32 products take
    ggml's dot-product path, GPT-2's forward about 1.3x as long)."""
    ggml = load_ggml()
    return {
        "ggml": ggml.ggml_version().decode(),
        "commit": ggml.ggml_commit().decode(),
        "ggml-python": getattr(ggml, "__version__", "?"),
        "llamafile": "on" if ggml.ggml_cpu_has_llamafile() else "off",
    }
