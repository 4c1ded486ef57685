"""Code generators: Python source for Python backends (C/GGML plugins bring their own)."""

from .python import FunctionSpec, PythonProgram, generate_python

__all__ = ["FunctionSpec", "PythonProgram", "generate_python"]
