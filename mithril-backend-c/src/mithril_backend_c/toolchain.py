"""Compile generated C to a shared library: -O3 + OpenMP, a BLAS found at build time (or the blocked
fallback), a content-hash disk cache with atomic writes and a file lock, and loading through cffi.

A model's code comes as independent translation units (:func:`build_units`: groups of kernels, the
constants, one unit per entry point), compiled in parallel and cached one by one (``part-<key>.o``), then
linked; a model whose library is cached compiles nothing, and one that shares kernels with a cached model
(the same layers at another depth) compiles only what differs.

The cache lives in ``$MITHRIL_C_CACHE`` (default ``~/.cache/mithril/c``). A library's key hashes the
source, the runtime source, the compiler's version, the flags, the BLAS (include path, defines and link
line) and the CPU model (``-march=native``), so a change to any of them rebuilds. The compiler, its
version, flags and BLAS are recorded in the cache (``toolchains.json``) as they are used: a process that
finds no compiler (an edge machine with a warm cache) computes the same keys from that record and loads
the libraries the cache holds; only a model missing from it needs a compiler (:class:`CCompileError`).

Every entry (``model-<key>.so``, ``part-<key>.o``, ``runtime-<key>.o``) has a ``<name>.meta`` written when it is built:
its size and SHA-256. An entry is used only after it matches (checked once per process and file), so a
truncated or empty file (a full disk, a killed copy) is rebuilt instead of crashing ``dlopen`` with
SIGBUS. Builds write ``*.tmp`` files renamed into place; those a killed build left behind are removed
once they are older than :data:`STALE_TEMPORARY_SECONDS`. Deleting the cache directory is always safe.

BLAS: the ``scipy-openblas32`` wheel (a dependency: a recent OpenBLAS with ``scipy_``-prefixed symbols,
linked by absolute rpath) is preferred, then a system ``-lopenblas``, ``-lcblas -lblas``, ``-lblas``, then the
blocked C GEMM; ``$MITHRIL_C_BLAS`` = ``scipy-openblas`` | ``system`` | ``none`` | a link line forces one.

Example:
    >>> from mithril_backend_c import toolchain
    >>> toolchain.blas_info()["name"] in ("scipy-openblas", "openblas", "blas", "custom", "none")  # doctest: +SKIP
    True
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import itertools
import json
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import _cffi_backend
import cffi
from mithril.errors import MithrilError
from mithril.extend import task, write_file_atomically

from .errors import CacheError

if TYPE_CHECKING:
    from .csource import TranslationUnit

__all__ = [
    "BLAS_CHOICES",
    "MAX_JOBS",
    "STALE_TEMPORARY_SECONDS",
    "CCompileError",
    "CacheError",
    "NativeLibrary",
    "blas_info",
    "build_library",
    "build_units",
    "cache_dir",
    "clear_hint",
    "compiler",
    "compiler_runs",
    "flags",
    "jobs",
    "load_library",
    "runtime_source",
    "verify_entry",
]

STALE_TEMPORARY_SECONDS = 30 * 60
"""``*.tmp`` files in the cache older than this are leftovers of killed builds (a build in progress
renames its temporary within seconds to minutes) and are removed when the next build starts."""


class CCompileError(MithrilError, RuntimeError):
    """The C compiler rejected generated code; the message has its output and the source path."""


def cache_dir() -> Path:
    """The compiled-library cache: ``$MITHRIL_C_CACHE``, else ``~/.cache/mithril/c`` (created if needed).

    >>> cache_dir().is_dir()
    True
    """
    path = Path(os.environ.get("MITHRIL_C_CACHE") or Path.home() / ".cache" / "mithril" / "c")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CacheError(
            f"cannot create the C backend's cache directory {str(path)!r}: {exc}; set $MITHRIL_C_CACHE to a "
            "writable directory"
        ) from None
    return path


def clear_hint() -> str:
    """How to clear the cache, for error messages.

    >>> "MITHRIL_C_CACHE" in clear_hint()
    True
    """
    path = os.environ.get("MITHRIL_C_CACHE") or str(Path.home() / ".cache" / "mithril" / "c")
    return (
        f"the compiled-library cache is {path!r} ($MITHRIL_C_CACHE, default ~/.cache/mithril/c); deleting that "
        "directory clears it (everything is rebuilt on demand)"
    )


NEEDS_COMPILER = "CBackend needs a C compiler (gcc or clang) on PATH, or set $CC"


def compiler() -> str:
    """The C compiler: ``$CC`` when set, else ``cc``, ``gcc`` or ``clang`` on ``PATH``; raises
    :class:`CCompileError` when there is none (or ``$CC`` names no program).

    >>> compiler()   # doctest: +SKIP
    '/usr/bin/cc'
    """
    cc = os.environ.get("CC")
    if cc:
        if shutil.which(cc) is None:
            raise CCompileError(f"{NEEDS_COMPILER}: $CC is {cc!r}, which is not an executable program")
        return cc
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise CCompileError(NEEDS_COMPILER)
    return cc


@functools.cache
def _compiler_version(cc: str) -> str:
    return subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[0]


@functools.cache
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags")):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _remembered(kind: str, key: Sequence[str], probe: Callable[[], Any], answers: Sequence[Any]) -> Any:
    """``probe()``'s JSON result, kept in the cache as ``probe-<kind>-<hash of key>.json`` so that later
    processes skip the probe (compiling and running test programs takes about half a second). A file
    holding anything but one of the possible ``answers`` (damaged, edited) is probed again and rewritten;
    deleting the file or the cache probes again."""
    path = cache_dir() / f"probe-{kind}-{_key(*key)}.json"
    try:
        remembered = json.loads(path.read_text())
        if remembered in answers:
            return remembered
    except (OSError, ValueError):
        pass
    result = probe()
    _write_json(path, result)  # if it cannot be written, the next process probes again
    return result


def _write_json(path: Path, value: Any) -> bool:
    """Write ``value`` as JSON to ``path`` (core's one safe writer); whether it was written."""
    try:
        _write_cached(path, json.dumps(value))
        return True
    except CacheError:
        return False


def _write_cached(path: Path, text: str) -> None:
    """Replace the cache file ``path`` with ``text``: never through a link planted there, never half a file
    (a cache folder may be shared, ``$MITHRIL_C_CACHE``); a failure is a :class:`CacheError`."""
    write_file_atomically(path, text, where=f"CBackend cache ({clear_hint()})", error=CacheError)


_BASE_FLAGS = ["-O3", "-fPIC", "-fno-math-errno", "-std=gnu11"]
# -fno-tree-loop-if-convert: GCC 12.2 at -O3 with AVX2 if-converts selects ('c ? x : y', 'a || b') in
# broadcast loop nests into masked vector loads at wrong addresses (wrong results, also in standalone
# C programs; operands loaded into locals first are not enough), right at -O2 or without this pass. Without
# it, no loop holding a '?:' vectorises: the emitters and the runtime write their selects branch-free
# (mt_sel_* of runtime.h), which restored the speed this flag had cost (ReLU epilogues, max pooling, the
# MLP's backward: tests/fuzz/regressions/test_c_where_gradient_if_conversion.py keeps the fix)
_EXTRA_FLAGS = (["-march=native"], ["-fopenmp"], ["-fno-tree-loop-if-convert"])
"""Flags every build uses, and those used when the compiler accepts them (probed by :func:`flags`)."""


@functools.cache
def flags() -> tuple[str, ...]:
    """-O3, OpenMP when the compiler has it, -march=native when it accepts it (probed once per compiler
    and CPU, remembered in the cache).

    >>> flags()[0]   # doctest: +SKIP
    '-O3'
    """
    cc = compiler()
    base, extras = _BASE_FLAGS, _EXTRA_FLAGS

    def probe() -> list[str]:
        chosen = list(base)
        for extra in extras:
            if _try_compile(cc, "int main(void){return 0;}", [*chosen, *extra], []):
                chosen += extra
        return chosen

    masks = itertools.product((False, True), repeat=len(extras))
    answers = [base + [flag for on, extra in zip(mask, extras, strict=True) if on for flag in extra] for mask in masks]
    key = [cc, _compiler_version(cc), _cpu_model(), *(" ".join(extra) for extra in extras)]  # new extras: new probe
    return tuple(_remembered("flags", key, probe, answers))


def _try_compile(cc: str, source: str, cflags: list[str], libs: list[str], *, run: bool = False) -> bool:
    """Whether ``source`` compiles and links (and, with ``run``, exits with 0)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "probe.c", Path(tmp) / "probe"
        src.write_text(source)
        result = subprocess.run([cc, *cflags, str(src), "-o", str(exe), *libs], capture_output=True)
        if result.returncode != 0:
            return False
        if not run:
            return True
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
        try:
            return subprocess.run([str(exe)], capture_output=True, env=env, timeout=60).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False


_BLAS_PROBE = """
#ifdef MT_BLAS_SCIPY
#include <cblas.h>
#define cblas_sgemm scipy_cblas_sgemm
#define openblas_get_num_threads scipy_openblas_get_num_threads
#define openblas_set_num_threads scipy_openblas_set_num_threads
#else
void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);
#ifdef MT_BLAS_OPENBLAS
int openblas_get_num_threads(void);
void openblas_set_num_threads(int);
#endif
#endif
int main(void) { float a = 1, b = 2, c = 0;
#ifdef MT_BLAS_OPENBLAS
if (openblas_get_num_threads() < 1) return 1;
openblas_set_num_threads(1);
#endif
cblas_sgemm(101, 111, 111, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
return c == 2.0f ? 0 : 1; }
"""

BLAS_CHOICES = ("scipy-openblas", "system", "none")
"""Values of ``$MITHRIL_C_BLAS`` besides a custom link line."""


def _blas(
    name: str, libs: Sequence[str], cflags: Sequence[str] = (), defines: Sequence[str] = (), **extra: Any
) -> dict[str, Any]:
    return {"name": name, "libs": list(libs), "cflags": list(cflags), "defines": list(defines), **extra}


def _scipy_openblas() -> dict[str, Any] | None:
    """The scipy-openblas32 wheel (a recent OpenBLAS, no root needed), or ``None`` if not installed."""
    try:  # optional: the wheel is one of the BLAS choices, absent when not installed
        import scipy_openblas32 as wheel
    except ImportError:
        return None
    include, lib = wheel.get_include_dir(), wheel.get_lib_dir()
    if not (Path(include) / "cblas.h").exists():
        return None
    return _blas(
        "scipy-openblas",
        [f"-L{lib}", f"-l{wheel.get_library()}", f"-Wl,-rpath,{lib}"],
        [f"-I{include}"],
        ["-DMT_USE_BLAS", "-DMT_BLAS_OPENBLAS", "-DMT_BLAS_SCIPY"],
        version=getattr(wheel, "__version__", ""),
    )


def _system_blas() -> list[dict[str, Any]]:
    return [
        _blas("openblas", ["-lopenblas"], defines=["-DMT_USE_BLAS", "-DMT_BLAS_OPENBLAS"]),
        _blas("openblas", ["-lopenblas"], defines=["-DMT_USE_BLAS"]),  # an OpenBLAS-named lib without the threads API
        _blas("blas", ["-lcblas", "-lblas"], defines=["-DMT_USE_BLAS"]),
        _blas("blas", ["-lblas"], defines=["-DMT_USE_BLAS"]),
    ]


def _probe_blas(cc: str, blas: dict[str, Any]) -> bool:
    return _try_compile(cc, _BLAS_PROBE, ["-O1", *blas["cflags"], *blas["defines"]], blas["libs"], run=True)


@functools.cache
def blas_info() -> dict[str, Any]:
    """The BLAS the generated code links: ``{"name", "libs", "cflags", "defines"}``; ``name`` is
    ``"scipy-openblas"`` (the ``scipy-openblas32`` wheel, preferred), ``"openblas"`` / ``"blas"`` (a system
    library), ``"custom"`` or ``"none"`` (the blocked C GEMM). ``$MITHRIL_C_BLAS`` forces a choice:
    ``scipy-openblas``, ``system`` (``-lopenblas``, then ``-lcblas -lblas``, then ``-lblas``), ``none``, or a
    link line such as ``-lmkl_rt``. A forced choice that does not link falls back to the blocked GEMM."""
    choice, candidates = _blas_request()
    if choice == "none":
        return _blas("none", [])
    cc = compiler()

    def probe() -> dict[str, Any]:
        for blas in candidates:
            if _probe_blas(cc, blas):
                return blas
        return _blas("none", [])

    # remembered per compiler, CPU, choice and candidates (a system BLAS installed later is found after the
    # probe file or the cache is deleted)
    key = [cc, _compiler_version(cc), _cpu_model(), choice, json.dumps(candidates)]
    chosen: dict[str, Any] = _remembered("blas", key, probe, [*candidates, _blas("none", [])])
    return chosen


def _blas_request() -> tuple[str, list[dict[str, Any]]]:
    """``$MITHRIL_C_BLAS`` (stripped) and the BLAS libraries it asks :func:`blas_info` to probe, in order."""
    choice = os.environ.get("MITHRIL_C_BLAS", "").strip()
    if choice == "none":
        return choice, []
    if choice == "scipy-openblas":
        wheel = _scipy_openblas()
        candidates = [wheel] if wheel else []
    elif choice == "system":
        candidates = _system_blas()
    elif choice:
        custom = choice.split()
        candidates = [
            _blas("custom", custom, defines=["-DMT_USE_BLAS", "-DMT_BLAS_OPENBLAS"]),
            _blas("custom", custom, defines=["-DMT_USE_BLAS"]),
        ]
    else:
        wheel = _scipy_openblas()
        candidates = ([wheel] if wheel else []) + _system_blas()
    return choice, candidates


@dataclass(frozen=True)
class Toolchain:
    """What the cache keys hash about the compiler: its command (``$CC`` or the path found), the first line
    of its ``--version``, the :func:`flags` and the :func:`blas_info` chosen for it."""

    cc: str
    version: str
    flags: tuple[str, ...]
    blas: dict[str, Any]


TOOLCHAINS_RECORD = "toolchains.json"
"""The cache's record of the toolchains that used it (most recent first), each with the CPU, flags and BLAS
it was probed for: a process without a compiler finds the entries they built (:func:`_cached_or_toolchain`)."""
_RECORDED: set[tuple[str, str, str, str]] = set()  # (cache, context, cc, version) this process has recorded
_MAX_RECORDED = 16


def _toolchain_context() -> str:
    """What a recorded toolchain must have been probed for to stand in for the compiler: this CPU
    (``-march=native``), these flags to probe and this BLAS request."""
    choice, candidates = _blas_request()
    flag_sets = (" ".join(_BASE_FLAGS), *(" ".join(extra) for extra in _EXTRA_FLAGS))
    return _key(_cpu_model(), *flag_sets, choice, json.dumps(candidates))


def _recorded_toolchains(path: Path) -> list[dict[str, Any]]:
    """The well-formed entries of the toolchain record at ``path`` (a missing or damaged record has none)."""
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return []

    def strings(value: Any) -> bool:
        return isinstance(value, list) and all(isinstance(item, str) for item in value)

    def well_formed(entry: Any) -> bool:
        return (
            isinstance(entry, dict)
            and all(isinstance(entry.get(field), str) for field in ("context", "cc", "version"))
            and strings(entry.get("flags"))
            and isinstance(blas := entry.get("blas"), dict)
            and all(strings(blas.get(field)) for field in ("libs", "cflags", "defines"))
        )

    return [entry for entry in entries if well_formed(entry)] if isinstance(entries, list) else []


def _record_toolchain(toolchain: Toolchain) -> None:
    """Put ``toolchain`` first in the cache's :data:`TOOLCHAINS_RECORD` (once per process and cache)."""
    directory, context = cache_dir(), _toolchain_context()
    mark = (str(directory), context, toolchain.cc, toolchain.version)
    if mark in _RECORDED:
        return
    entry: dict[str, Any] = {"context": context, "cc": toolchain.cc, "version": toolchain.version}
    entry.update(flags=list(toolchain.flags), blas=toolchain.blas)
    path = directory / TOOLCHAINS_RECORD
    try:
        with _locked(directory / f"{TOOLCHAINS_RECORD}.lock"):
            entries = _recorded_toolchains(path)
            written = bool(entries) and entries[0] == entry
            if not written:
                others = [e for e in entries if (e["context"], e["cc"], e["version"]) != mark[1:]]
                written = _write_json(path, [entry, *others][:_MAX_RECORDED])
    except CacheError:  # a read-only cache: its entries are used, nothing is recorded
        written = False
    if written:  # else the next build tries again
        _RECORDED.add(mark)


def _cached_or_toolchain(entry: Callable[[Toolchain], Path]) -> tuple[Path, Toolchain | None]:
    """The cache entry ``entry(toolchain)`` names and the toolchain to build it with: the compiler found now
    (recorded in the cache as it is used). Without one, the entry a recorded toolchain of this CPU, flags and
    BLAS request built, if the cache holds it (toolchain ``None``: nothing may be built; a warm cache needs
    no compiler); otherwise the missing compiler's :class:`CCompileError`, saying where it looked."""
    try:
        cc = compiler()
    except CCompileError as missing:
        directory, context = cache_dir(), _toolchain_context()
        recorded = [e for e in _recorded_toolchains(directory / TOOLCHAINS_RECORD) if e["context"] == context]
        for e in recorded:
            target = entry(Toolchain(e["cc"], e["version"], tuple(e["flags"]), e["blas"]))
            if verify_entry(target):
                return target, None
        built = "; ".join(f"{e['cc']} ({e['version']})" for e in recorded)
        held = f"it holds libraries built by {built}" if built else "none there was built for this CPU, flags and BLAS"
        raise CCompileError(
            f"{missing}. A model the cache holds needs none, but the cache {str(directory)!r} holds no library "
            f"for this one ({held})"
        ) from None
    toolchain = Toolchain(cc, _compiler_version(cc), flags(), blas_info())
    _record_toolchain(toolchain)
    return entry(toolchain), toolchain


def runtime_source() -> tuple[str, str]:
    """``(runtime.h, runtime.c)`` as shipped in the package."""
    pkg = resources.files("mithril_backend_c")
    return (pkg / "runtime.h").read_text(), (pkg / "runtime.c").read_text()


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    try:
        handle = open(path, "a")
    except OSError as exc:
        raise CacheError(f"cannot create the lock file {path}: {exc}; {clear_hint()}") from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


_COMPILER_RUNS = [0]  # compiler processes run by _run (compiles and links; probes excluded)
_COMPILER_RUNS_LOCK = threading.Lock()


def compiler_runs() -> int:
    """How many times this process has run the C compiler to build a cache entry (compiles and links;
    the flag and BLAS probes excluded): a library found in the cache adds none.

    >>> before = compiler_runs(); _ = build_library("int f(void) { return 1; }\\n")   # doctest: +SKIP
    >>> compiler_runs() - before in (0, 1)   # doctest: +SKIP
    True
    """
    return _COMPILER_RUNS[0]


def _run(cmd: list[str], source_path: Path, what: str = "") -> None:
    with _COMPILER_RUNS_LOCK:
        _COMPILER_RUNS[0] += 1
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        where = f"{what} " if what else ""
        raise CCompileError(
            f"the C compiler failed on {where}the generated source {source_path}\n"
            f"command: {' '.join(cmd)}\n{result.stderr.strip() or result.stdout.strip()}\n({clear_hint()})"
        )


_VERIFIED: set[tuple[str, int, int, int]] = set()  # (path, size, mtime_ns, inode) of entries checked
_VERIFIED_LOCK = threading.Lock()


def _meta_path(target: Path) -> Path:
    return target.with_name(target.name + ".meta")


def _file_digest(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def verify_entry(target: Path) -> bool:
    """Whether cache entry ``target`` exists and matches the size and SHA-256 recorded when it was built
    (a missing or unreadable record, or an entry from before records existed, does not match).

    >>> verify_entry(cache_dir() / "model-does-not-exist.so")
    False
    """
    try:
        stat = target.stat()
    except OSError:
        return False
    key = (str(target), stat.st_size, stat.st_mtime_ns, stat.st_ino)
    with _VERIFIED_LOCK:
        if key in _VERIFIED:
            return True
    try:
        meta = json.loads(_meta_path(target).read_text())
        if (
            stat.st_size == 0
            or int(meta["size"]) != stat.st_size
            or _file_digest(target) != (stat.st_size, meta["sha256"])
        ):
            return False
    except (OSError, ValueError, KeyError, TypeError):
        return False
    with _VERIFIED_LOCK:
        _VERIFIED.add(key)
    return True


def _remove_stale_temporaries(directory: Path) -> None:
    """Delete ``*.tmp`` files under ``directory`` left by builds killed more than
    :data:`STALE_TEMPORARY_SECONDS` ago (younger ones may belong to a build in progress)."""
    limit = time.time() - STALE_TEMPORARY_SECONDS
    for path in (*directory.glob("*.tmp"), *directory.glob("*/*.tmp")):
        try:
            if path.is_file() and path.stat().st_mtime < limit:
                path.unlink()
        except OSError:
            pass  # removed by another process meanwhile, or not ours to remove


def _atomic_build(target: Path, build: Any) -> Path:
    """Build ``target`` once across threads and processes: lock, re-check, build to a temp, record its
    size and hash, rename. An entry that does not match its record is rebuilt."""
    if verify_entry(target):
        return target
    with _locked(target.with_suffix(target.suffix + ".lock")):
        if verify_entry(target):
            return target
        _remove_stale_temporaries(target.parent)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.stem, suffix=target.suffix + ".tmp")
        os.close(fd)
        meta_tmp = f"{tmp}.meta.tmp"
        try:
            build(Path(tmp))
            size, digest = _file_digest(Path(tmp))
            if size == 0:
                raise CCompileError(f"the C compiler wrote an empty {target.name} ({clear_hint()})")
            try:
                Path(meta_tmp).write_text(json.dumps({"size": size, "sha256": digest}))
                os.replace(meta_tmp, _meta_path(target))  # the record first: a crash in between leaves
                os.replace(tmp, target)  # an entry that does not match it, so it is rebuilt
            except OSError as exc:
                raise CacheError(f"cannot write the cache entry {target}: {exc}; {clear_hint()}") from None
        finally:
            for path in (tmp, meta_tmp):
                if os.path.exists(path):
                    os.unlink(path)
    return target


def _key(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:32]


def _runtime_entry(toolchain: Toolchain) -> tuple[Path, Callable[[Path], None]]:
    """The runtime object's cache path (its name hashes the runtime, compiler, flags, BLAS defines and
    CPU) and the function that builds it into a temporary path."""
    cc, cflags, blas = toolchain.cc, list(toolchain.flags), toolchain.blas
    header, body = runtime_source()
    defines = [*blas["cflags"], *blas["defines"]]
    key = _key(header, body, cc, toolchain.version, *cflags, *defines, _cpu_model())
    directory = cache_dir()

    def build(tmp: Path) -> None:
        src_dir = directory / f"runtime-{key}"
        src_dir.mkdir(exist_ok=True)
        _write_cached(src_dir / "runtime.h", header)
        _write_cached(src_dir / "runtime.c", body)
        _run([cc, *cflags, *defines, "-c", str(src_dir / "runtime.c"), "-o", str(tmp)], src_dir / "runtime.c")

    return directory / f"runtime-{key}.o", build


def _include_dir(directory: Path, header: str) -> Path:
    """The cache's directory holding this ``runtime.h`` (rewritten atomically when missing or damaged)."""
    include = directory / f"include-{_key(header)}"
    include.mkdir(exist_ok=True)
    try:
        present = (include / "runtime.h").read_text()
    except (OSError, UnicodeDecodeError):
        present = None
    if present != header:
        _write_cached(include / "runtime.h", header)
    return include


def build_library(source: str) -> Path:
    """The shared library for ``source``, one translation unit (compiled once; later calls hit the cache).

    >>> build_library("int f(void) { return 1; }\\n").suffix   # doctest: +SKIP
    '.so'
    """
    header, _ = runtime_source()
    directory = cache_dir()

    def entry(toolchain: Toolchain) -> Path:
        runtime, _ = _runtime_entry(toolchain)
        # (the runtime object's name hashes the BLAS include path and defines, the libs are hashed here)
        parts = (*toolchain.flags, *toolchain.blas["libs"], _cpu_model())
        return directory / f"model-{_key(source, header, runtime.name, toolchain.cc, toolchain.version, *parts)}.so"

    target, toolchain = _cached_or_toolchain(entry)
    if toolchain is None or verify_entry(target):
        return target
    cc, cflags, blas = toolchain.cc, list(toolchain.flags), toolchain.blas
    runtime = _atomic_build(*_runtime_entry(toolchain))
    source_path = target.with_suffix(".c")

    def build(tmp: Path) -> None:
        include = _include_dir(directory, header)
        _write_cached(source_path, source)
        cmd = [cc, *cflags, "-shared", f"-I{include}", str(source_path), str(runtime), "-o", str(tmp), *blas["libs"]]
        _run([*cmd, "-lm"], source_path)

    return _atomic_build(target, build)


MAX_JOBS = 8
"""At most this many compiler processes run at once for one library."""


def jobs() -> int:
    """How many translation units :func:`build_units` compiles at once: the CPUs this process may run on,
    at most :data:`MAX_JOBS`.

    >>> 1 <= jobs() <= MAX_JOBS
    True
    """
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    return max(1, min(count, MAX_JOBS))


def build_units(
    units: Sequence[TranslationUnit],
    description: str = "CBackend: compiling generated C",
    *,
    verbose: bool | None = None,
) -> Path:
    """The shared library made of ``units`` (:meth:`~mithril_backend_c.csource.CSource.units`): each unit
    is compiled to its own cached object (``part-<key>.o``, keyed by its text and the flags, verified
    like every entry), the missing ones in parallel (:func:`jobs` at a time, longest first), then linked
    with the runtime into ``model-<key>.so``. A library in the cache is returned without looking at its
    parts; a damaged part is rebuilt; models sharing a unit (the same kernels at another depth) share its
    object. The compile runs as a :func:`mithril.extend.task` named ``description`` and the number of
    parts to compile (shown on a terminal after 2 s with the steps done, the link being the last, and the
    elapsed time; ``verbose``: ``True`` shows it at once, ``False``
    never, ``None`` follows the terminal and ``$MITHRIL_PROGRESS``).

    >>> from mithril_backend_c.csource import TranslationUnit
    >>> build_units([TranslationUnit("f", "int f(void) { return 1; }\\n")]).suffix   # doctest: +SKIP
    '.so'
    """
    header, _ = runtime_source()
    directory = cache_dir()

    def unit_keys(toolchain: Toolchain) -> list[str]:
        common = (header, toolchain.cc, toolchain.version, *toolchain.flags, _cpu_model())
        return [_key(unit.text, "optimize" if unit.optimize else "-O0", *common) for unit in units]

    def entry(toolchain: Toolchain) -> Path:
        runtime, _ = _runtime_entry(toolchain)
        return directory / f"model-{_key('units', *unit_keys(toolchain), runtime.name, *toolchain.blas['libs'])}.so"

    target, toolchain = _cached_or_toolchain(entry)
    if toolchain is None or verify_entry(target):
        return target
    cc, cflags, blas = toolchain.cc, list(toolchain.flags), toolchain.blas
    runtime, build_runtime = _runtime_entry(toolchain)
    keys = unit_keys(toolchain)
    objects = [directory / f"part-{key}.o" for key in keys]
    todo = sorted(
        ((unit, obj) for unit, obj in zip(units, objects, strict=True) if not verify_entry(obj)),
        key=lambda item: -len(item[0].text),
    )
    include = _include_dir(directory, header)
    plain = [("-O0" if flag.startswith("-O") else flag) for flag in cflags]  # entry points: only calls

    def compile_unit(unit: TranslationUnit, obj: Path) -> None:
        source_path = obj.with_suffix(".c")

        def build(tmp: Path) -> None:
            _write_cached(source_path, unit.text)
            cmd = [cc, *(cflags if unit.optimize else plain), f"-I{include}", "-c", str(source_path), "-o", str(tmp)]
            _run(cmd, source_path, unit.label)

        _atomic_build(obj, build)

    def link(tmp: Path) -> None:
        cmd = [cc, *cflags, "-shared", *map(str, objects), str(runtime), "-o", str(tmp), *blas["libs"], "-lm"]
        _run(cmd, objects[0] if objects else runtime, "the link of")

    # the runtime object (the longest job, shared by every model) compiles alongside the parts
    work: list[Callable[[], Any]] = [] if verify_entry(runtime) else [lambda: _atomic_build(runtime, build_runtime)]
    work += [functools.partial(compile_unit, unit, obj) for unit, obj in todo]
    runtime_note = " + runtime" if len(work) > len(todo) else ""
    label = f"{description} ({len(todo)} parts{runtime_note})"  # short: a terminal line also shows steps and time
    with task(label, total=len(work) + 1, verbose=verbose) as advance:
        if work:
            pool = ThreadPoolExecutor(max_workers=min(jobs(), len(work)), thread_name_prefix="mithril-cc")
            try:
                for future in as_completed([pool.submit(job) for job in work]):
                    future.result()  # the first failure raises (the rest are cancelled below)
                    advance(1)
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
        _atomic_build(target, link)
        advance(1)
    return target


@dataclass(frozen=True)
class NativeLibrary:
    """A loaded library bound through ``cffi`` (ABI mode): ``lib.<name>`` calls a function declared in
    the library's ``cdef`` with its argument types checked; ``ffi`` makes the declared structs.

    >>> native = load_library(path, "int twice(int x);")   # doctest: +SKIP
    >>> native.lib.twice(21)                               # doctest: +SKIP
    42
    """

    path: Path
    ffi: Any
    lib: Any

    def address(self, name: str) -> int:
        """The address of declared function ``name`` (for C code that calls it: ggml's custom ops)."""
        return int(self.ffi.cast("uintptr_t", getattr(self.lib, name)))

    def buffer_view(self) -> Callable[[Any], Any]:
        """A function giving an object's buffer as a ``char[]`` cdata without copying, like
        ``ffi.from_buffer(x)`` but calling ``_cffi_backend`` directly: ABI mode's ``ffi.from_buffer`` is a
        Python wrapper that costs as much again per call, and a call of a small model makes several.
        Two views compare equal when they start at the same address.

        >>> view = native.buffer_view()                  # doctest: +SKIP
        >>> view(np.ones(4, np.float32))                 # doctest: +SKIP
        <cdata 'char[]' buffer len 16 from 'numpy.ndarray' object>
        """
        return functools.partial(_cffi_backend.from_buffer, self.ffi.typeof("char[]"))


def load_library(path: Path, cdef: str = "") -> NativeLibrary:
    """Load a built model through ``cffi``: ``cdef`` declares what Python calls (the generated entry
    points' argument structs and prototypes, the same text as the generated header). OpenMP workers keep
    the runtime's default wait policy (spin briefly, then sleep): the generated code runs BLAS
    single-threaded on those same workers, so no other pool waits for the cores, and a worker that is
    still spinning starts the next parallel loop at once (a sleeping one costs a wake-up per loop).
    ``$OMP_WAIT_POLICY`` overrides it if set before the first OpenMP runtime is loaded.

    Only a cache entry that matches its recorded size and hash is loaded (a damaged one would crash
    the process in ``dlopen``); anything else raises :class:`CacheError` saying how to clear the cache.

    >>> path = build_library("int twice(int x) { return 2 * x; }\\n")   # doctest: +SKIP
    >>> load_library(path, "int twice(int x);").lib.twice(21)          # doctest: +SKIP
    42
    """
    path = Path(path)
    if path.parent.resolve() == cache_dir().resolve() and not verify_entry(path):
        raise CacheError(
            f"the cached library {path} does not match the size and hash recorded when it was built "
            f"(truncated or modified); expected build_library() to have rebuilt it. {clear_hint()}"
        )
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    try:
        return NativeLibrary(path, ffi, ffi.dlopen(str(path)))
    except OSError as exc:
        raise CacheError(f"cannot load the compiled library {path}: {exc}; {clear_hint()}") from None
