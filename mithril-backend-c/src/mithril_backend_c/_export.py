"""``export(pm, directory, params)``: a self-contained C program for a compiled model.

Writes ``model.c`` (generated code with the runtime inlined), ``model.h`` (argument structs and entry
points), ``model.weights`` (the parameters and buffers such as BatchNorm's running statistics, raw, in
the order of ``model.h``), ``main.c`` (reads the
weights and raw data inputs, runs ``evaluate``, writes raw outputs), ``BUILD`` (the build command) and
``manifest.json`` (what was written: the file of every input and output key, the parameters' order,
dtypes, shapes and origin).

    cc -O3 main.c model.c -lm            # the built-in blocked GEMM: no BLAS, no Python package

``model.c`` does not pick a BLAS itself: ``-DMT_USE_BLAS`` (plus a link line) on the command line does.
``BUILD`` holds the one exact command: with the system BLAS the in-process build used (``-lopenblas``,
``-lcblas -lblas``, ...) it adds that BLAS (``cc -O3 main.c model.c -lm -DMT_USE_BLAS ... -lopenblas``);
when the in-process build used the ``scipy-openblas32`` wheel (a Python package), ``BUILD`` stays the plain
built-in-GEMM command and ``BUILD.scipy-openblas`` has the alternative that links the wheel's library by
absolute path (valid while that environment exists).

The parameters must be given (``params=``, e.g. the trained ones) or asked for (``randomize=True``): a
program silently holding random weights is never written. A directory that already holds files is
refused unless ``overwrite=True``; then the exported files are replaced, never written through (a symlink
already in the directory is replaced by the file: :func:`mithril.extend.write_file_atomically`), and a
``directory`` that is itself a symlink is refused. Keys reach the C source only as escaped string literals
and comments, and file names only through :func:`~mithril.extend.escape.safe_file_name`
(``input_<key>.bin`` for a plain key; a sanitised, length-bounded name with a hash suffix otherwise:
``manifest.json`` and the returned :class:`ExportResult` say which).

Example:
    >>> import mithril_backend_c
    >>> result = mithril_backend_c.export(pm, "out", params)     # doctest: +SKIP
    >>> result.directory, result.inputs                             # doctest: +SKIP
    (PosixPath('out'), {'input': 'input_input.bin'})
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from mithril.errors import ArgumentError, ModelKeyError, ShapeError
from mithril.extend import check_output_directory, escape, write_file_atomically

from . import toolchain
from .context import C_TYPES
from .csource import CFunction
from .standalone import model_header, standalone_source

__all__ = ["ExportResult", "data_file_names", "export", "export_program"]

PREFIX = "mithril"


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote. Path-like (``os.fspath(result)`` and ``str(result)`` are the directory), so
    code that used the returned directory keeps working.

    ``files``: the names written, ``inputs`` / ``outputs``: key -> the raw file ``main.c`` reads / writes
    for it, ``params``: where the weights came from (``"given"``, or ``"random (seed ...)"``).

    >>> r = ExportResult(Path("out"), ("model.c",), "given", {"x": "input_x.bin"}, {"y": "output_y.bin"})
    >>> str(r), r.inputs["x"]
    ('out', 'input_x.bin')
    """

    directory: Path
    files: tuple[str, ...]
    params: str
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)

    def __fspath__(self) -> str:
        return os.fspath(self.directory)

    def __str__(self) -> str:
        return str(self.directory)

    def summary(self) -> str:
        """A few lines saying what was written, for a log or a terminal."""
        lines = [f"exported to {self.directory}: {', '.join(self.files)}", f"parameters: {self.params}"]
        lines += [f"input {key!r}: {name}" for key, name in self.inputs.items()]
        lines += [f"output {key!r}: {name} (written by the program)" for key, name in self.outputs.items()]
        return "\n".join(lines)


def export(
    pm: Any,
    directory: str | Path,
    params: Mapping[str, Any] | None = None,
    *,
    randomize: bool = False,
    seed: int | None = None,
    overwrite: bool = False,
) -> ExportResult:
    """Write the standalone program of a model compiled with ``CBackend``; the same as
    ``pm.export(directory, params, randomize=..., seed=..., overwrite=...)``.

    >>> export(pm, "out", pm.get_parameters()).files[:2]   # doctest: +SKIP
    ('model.c', 'model.h')
    """
    program = pm.program
    if not hasattr(program, "functions") or not hasattr(program, "source"):
        raise ArgumentError(
            f"mithril_backend_c.export needs a model compiled with ml.CBackend(), not {type(pm.backend).__name__}"
        )
    result: ExportResult = pm.export(directory, params, randomize=randomize, seed=seed, overwrite=overwrite)
    return result


def _write(directory: Path, name: str, content: Any) -> str:
    """Replace ``directory/name`` with ``content`` (never through a link); returns ``name``."""
    write_file_atomically(directory / name, content, where="export", error=ArgumentError)
    return name


def data_file_names(keys: Iterable[str], prefix: str) -> dict[str, str]:
    """Key -> ``<prefix>_<key>.bin`` made safe (:func:`~mithril.extend.escape.safe_file_name`), distinct
    for distinct keys.

    >>> data_file_names(["x", "a/b"], "input")
    {'x': 'input_x.bin', 'a/b': 'input_a_b-5b2b4f85.bin'}
    """
    names: dict[str, str] = {}
    used: set[str] = set()
    for key in keys:
        name = escape.safe_file_name(f"{prefix}_{key}", ".bin")
        count = 1
        while name in used:
            name = escape.safe_file_name(f"{prefix}_{key}#{count}", ".bin")
            count += 1
        used.add(name)
        names[key] = name
    return names


def _is_weight(field: Any, params: Mapping[str, Any]) -> bool:
    """Whether an entry point input comes from ``model.weights``: a parameter, or a buffer (running
    statistics reach the generated code as runtime inputs, but they are trained state, given in ``params``)."""
    return field.role == "param" or field.key in params


def write_example(pm: Any, program: Any, directory: Path, params: Mapping[str, np.ndarray], seed: int = 0) -> list[str]:
    """Write example inputs (normal floats, zero integers, in the files :func:`data_file_names` names) and
    ``expected_output.txt``: the lines the standalone program prints for them, as computed in Python. The
    program's sums agree to the dtype's rounding (about 7 significant digits in float32: its GEMM may
    differ from the BLAS used in-process). Returns the names written."""
    evaluate = next(fn for fn in program.functions if fn.name == "evaluate")
    rng = np.random.default_rng(seed)
    data_fields = [f for f in evaluate.inputs if f.role == "data" and not _is_weight(f, params)]
    names = data_file_names([f.key for f in data_fields], "input")
    data = {}
    for f in data_fields:
        values = rng.normal(size=f.shape) if np.dtype(f.dtype).kind == "f" else np.zeros(f.shape)
        data[f.key] = np.ascontiguousarray(values, dtype=f.dtype)
        _write(directory, names[f.key], data[f.key].tobytes())
    outputs = pm.evaluate({k: pm.backend.array(v) for k, v in params.items()}, data)
    lines = []
    for f in (f for group in evaluate.returns for f in group):
        values = np.asarray(pm.backend.to_numpy(outputs[f.key]), dtype=np.float64)
        lines.append(f"{f.key}: {values.size} values, sum {values.sum():.9g}")
    _write(directory, "expected_output.txt", ("\n".join(lines) + "\n").encode("utf-8", errors="surrogatepass"))
    return [names[f.key] for f in data_fields] + ["expected_output.txt"]


def export_program(
    program: Any,
    directory: Path,
    params: Mapping[str, np.ndarray],
    *,
    overwrite: bool = False,
    params_source: str = "given",
    pm: Any = None,
) -> ExportResult:
    """Write the program's files into ``directory`` (created if needed; refused when it holds files,
    unless ``overwrite``) and, given the compiled model ``pm``, example inputs and their expected output.
    Every parameter is checked (missing, unknown, shape) before anything is written."""
    directory = Path(directory)
    check_output_directory(directory, overwrite, "export")
    evaluate = next(fn for fn in program.functions if fn.name == "evaluate")
    weights = [f for f in evaluate.inputs if _is_weight(f, params)]
    arrays = _weight_arrays(weights, params, [f for f in evaluate.inputs if f.role == "param"])
    directory.mkdir(parents=True, exist_ok=True)
    blas = toolchain.blas_info()
    written = ["model.c", "model.h", "model.weights", "main.c", "BUILD"]
    _write(directory, "model.c", standalone_source(program.code))
    _write(directory, "model.h", model_header(program.functions))
    _write(directory, "model.weights", lambda handle: _write_arrays(handle, arrays))
    data_fields = [f for f in evaluate.inputs if not _is_weight(f, params)]
    out_fields = [f for group in evaluate.returns for f in group]
    inputs = data_file_names([f.key for f in data_fields], "input")
    outputs = data_file_names([f.key for f in out_fields], "output")
    _write(directory, "main.c", _main_c(evaluate, weights, inputs, outputs))
    plain = "cc -O3 main.c model.c -lm"
    alternative = directory / "BUILD.scipy-openblas"
    if blas["name"] == "scipy-openblas":  # a Python package: not the default of a standalone program
        build = plain
        _write(directory, alternative.name, " ".join([plain, *blas["cflags"], *blas["defines"], *blas["libs"]]) + "\n")
        written.append(alternative.name)
    else:
        build = " ".join([plain, *blas["cflags"], *blas["defines"], *blas["libs"]])
        if alternative.is_symlink() or alternative.exists():
            alternative.unlink()
    _write(directory, "BUILD", build + "\n")
    if pm is not None:
        written += write_example(pm, program, directory, params)
    written.append("manifest.json")
    manifest = {
        "params": params_source,
        "files": written,
        "weights": [
            {"key": f.key, "dtype": f.dtype.name, "shape": list(f.shape), "offset": offset}
            for f, offset in zip(weights, np.cumsum([0] + [a.nbytes for a in arrays]).tolist()[:-1], strict=True)
        ],
        "inputs": {f.key: {"file": inputs[f.key], "dtype": f.dtype.name, "shape": list(f.shape)} for f in data_fields},
        "outputs": {f.key: {"file": outputs[f.key], "dtype": f.dtype.name, "shape": list(f.shape)} for f in out_fields},
        "build": build,
    }
    _write(directory, "manifest.json", json.dumps(manifest, indent=1) + "\n")
    return ExportResult(directory, tuple(written), params_source, inputs, outputs)


def _write_arrays(handle: BinaryIO, arrays: list[np.ndarray]) -> None:
    for array in arrays:
        handle.write(array.tobytes())


def _weight_arrays(weights: list[Any], params: Mapping[str, np.ndarray], required: list[Any]) -> list[np.ndarray]:
    expected = [f.key for f in weights]
    missing = [f.key for f in required if f.key not in params]
    unknown = sorted(set(params) - set(expected))
    if missing or unknown:
        parts = ([f"missing {missing}"] if missing else []) + ([f"unknown {unknown}"] if unknown else [])
        raise ModelKeyError(f"export(params=...): {'; '.join(parts)}; expected exactly {sorted(expected)}")
    arrays = []
    for f in weights:
        array = np.ascontiguousarray(params[f.key], dtype=f.dtype)
        if array.shape != f.shape:
            raise ShapeError(f"export(params=...): {f.key!r} has shape {array.shape}, expected {f.shape}")
        arrays.append(array)
    return arrays


def _main_c(fn: CFunction, weights: list[Any], inputs: Mapping[str, str], outputs: Mapping[str, str]) -> str:
    params = weights
    weight_keys = {f.key for f in weights}
    data = [f for f in fn.inputs if f.key not in weight_keys]
    outs = [f for group in fn.returns for f in group]
    lines = [
        "/* Example program: ./model [dir] reads dir/model.weights and the raw input files below,",
        " * runs evaluate and writes the raw output files below; it prints the sum of every output.",
        " * (manifest.json lists the same files with their keys, dtypes and shapes.) */",
    ]
    lines += [f"/*   input {escape.c_comment(repr(f.key))}: {inputs[f.key]} */" for f in data]
    lines += [f"/*   output {escape.c_comment(repr(f.key))}: {outputs[f.key]} */" for f in outs]
    lines += [
        "#include <stdio.h>",
        "#include <stdlib.h>",
        '#include "model.h"',
        "",
        "static int read_raw(const char *dir, const char *name, void *dst, size_t nbytes, FILE *shared) {",
        "    char path[4096];",
        "    FILE *f = shared;",
        '    if (!f) { snprintf(path, sizeof path, "%s/%s", dir, name); f = fopen(path, "rb"); }',
        "    if (!f || fread(dst, 1, nbytes, f) != nbytes) "
        '{ fprintf(stderr, "cannot read %zu bytes of %s\\n", nbytes, name); return 1; }',
        "    if (!shared) fclose(f);",
        "    return 0;",
        "}",
        "",
        "int main(int argc, char **argv) {",
        '    const char *dir = argc > 1 ? argv[1] : ".";',
        "    char path[4096];",
        "    int64_t error[3] = {0, 0, 0};",
        f"    {PREFIX}_evaluate_args a = {{0}};",
        "    a.error = error;",
        '    snprintf(path, sizeof path, "%s/model.weights", dir);',
        '    FILE *w = fopen(path, "rb");',
        '    if (!w) { fprintf(stderr, "cannot open %s\\n", path); return 1; }',
    ]

    def allocate(f: Any, read_from: str | None = None, stream: str = "NULL") -> None:
        """Lines giving field ``f`` of the arguments its own buffer, read from the file named by the C string
        ``read_from`` (from the open ``stream`` when given) when there is one."""
        n, ct = int(np.prod(f.shape)), C_TYPES[f.dtype.name]
        lines.append(f"    {ct} *{f.name} = malloc({max(n, 1)} * sizeof({ct}));")
        lines.append(f'    if (!{f.name}) {{ fprintf(stderr, "out of memory\\n"); return 1; }}')
        if read_from is not None:
            lines.append(f"    if (read_raw(dir, {read_from}, {f.name}, {n} * sizeof({ct}), {stream})) return 1;")
        lines.append(f"    a.{f.name} = {f.name};")

    for f in params:
        allocate(f, '"model.weights"', "w")
    lines.append("    fclose(w);")
    for f in data:
        allocate(f, escape.c_string_literal(inputs[f.key]))
    for f in outs:
        allocate(f)
    lines += [
        f"    int status = {PREFIX}_evaluate(&a, 1);",
        "    if (status == MT_ERR_INDEX) {",
        '        fprintf(stderr, "evaluate failed: index %lld at flat position %lld is out of range for %s\\n",',
        f"                (long long)error[1], (long long)error[2], {PREFIX}_evaluate_check_site((long)error[0]));",
        "        return 2;",
        "    }",
        '    if (status != MT_OK) { fprintf(stderr, "evaluate failed with code %d\\n", status); return 1; }',
    ]
    for f in outs:
        n = int(np.prod(f.shape))
        ct = C_TYPES[f.dtype.name]
        lines += [
            "    {",
            f"        double s = 0; for (long i = 0; i < {n}; i++) s += (double){f.name}[i];",
            f'        printf("%s: %ld values, sum %.9g\\n", {escape.c_string_literal(f.key)}, (long){n}, s);',
            f'        snprintf(path, sizeof path, "%s/%s", dir, {escape.c_string_literal(outputs[f.key])});',
            '        FILE *o = fopen(path, "wb");',
            f"        int failed = !o || fwrite({f.name}, sizeof({ct}), {n}, o) != {n};",
            "        if (o && fclose(o) != 0) failed = 1; /* a full disk shows when the buffer is written */",
            '        if (failed) { fprintf(stderr, "cannot write %s\\n", path); return 1; }',
            "    }",
        ]
    lines += ["    return 0;", "}", ""]
    return "\n".join(lines)
