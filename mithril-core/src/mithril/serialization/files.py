"""Writing files safely: the one function every writer of Mithril uses (parameter files, checkpoints, exported
programs), and the check of a folder an export writes into.

:func:`write_file_atomically` never writes through a symlink and never leaves half a file: it writes a
temporary with an unpredictable name, created exclusively (``O_EXCL | O_NOFOLLOW``) in the target's folder,
flushes it to disk, then renames it onto the target. A symlink already at the target is replaced (the link,
not the file it points to); a failure removes the temporary and leaves the old file as it was. The new file
gets the mode a new file gets (the umask applies), or the old file's mode when it replaces one.

:func:`check_output_directory` refuses an output folder that is a file, a symbolic link (dangling or not: the
files would land elsewhere), or that holds files while ``overwrite`` is false.

Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "notes.txt")
    >>> write_file_atomically(path, "hello", where="example").read_text()
    'hello'
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from ..errors import ArgumentError, CheckpointError, MithrilError

__all__ = ["check_output_directory", "write_file_atomically"]

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)

Content = bytes | str | Callable[[BinaryIO], object]


def write_file_atomically(
    path: str | os.PathLike[str],
    content: Content,
    *,
    where: str,
    error: type[MithrilError] = CheckpointError,
) -> Path:
    """Replace the file at ``path`` with ``content`` (bytes, text written as UTF-8, or a function that writes
    to the binary file object it is given); returns the path.

    A failure (a full disk, a missing or read-only folder, ``path`` naming a folder) raises ``error``
    (``"<where>: cannot write <path>: <reason>"``) and leaves the old file, if any, unchanged.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> write_file_atomically(folder / "a.bin", lambda f: f.write(b"\\x00\\x01"), where="example").read_bytes()
    b'\\x00\\x01'
    """
    target = Path(path)
    # at most 100 bytes of the name: with the suffix, a name of any length stays under the 255-byte limit
    stem = target.name.encode("utf-8", "surrogateescape")[:100].decode("utf-8", "ignore")
    temporary = target.with_name(f".{stem}.{secrets.token_hex(8)}.tmp")
    try:
        handle = _create(temporary, _mode_of(target))
    except OSError as exc:
        raise error(f"{where}: cannot write {target}: {exc.strerror or exc}") from None
    try:
        with handle:
            if callable(content):
                content(handle)
            else:
                handle.write(content.encode() if isinstance(content, str) else content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException as exc:
        temporary.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise error(f"{where}: cannot write {target}: {exc.strerror or exc}") from None
        raise
    return target


def _mode_of(target: Path) -> int | None:
    """The permission bits of the regular file ``target`` replaces; ``None`` when there is none (a new file, or
    a link: its target's mode is not the link's to pass on)."""
    try:
        info = os.lstat(target)
    except OSError:
        return None
    return stat.S_IMODE(info.st_mode) if stat.S_ISREG(info.st_mode) else None


def _create(temporary: Path, mode: int | None) -> BinaryIO:
    """The temporary, created exclusively (never an existing file or link), with ``mode`` or, when ``None``,
    the mode of a new file (0o666 less the umask)."""
    descriptor = os.open(temporary, _FLAGS, 0o600 if mode is not None else 0o666)
    try:
        if mode is not None and hasattr(os, "fchmod"):
            os.fchmod(descriptor, mode)
        return os.fdopen(descriptor, "wb")
    except BaseException:
        os.close(descriptor)
        temporary.unlink(missing_ok=True)
        raise


def check_output_directory(directory: str | os.PathLike[str], overwrite: bool, where: str) -> Path:
    """``directory`` as a path, after refusing a symbolic link, a file, or a folder that holds anything while
    ``overwrite`` is false (a folder that does not exist yet is fine: the export creates it).

    >>> check_output_directory("/nonexistent/dir", overwrite=False, where="export")
    PosixPath('/nonexistent/dir')
    """
    directory = Path(directory)
    if directory.is_symlink():
        target, resolved = os.readlink(directory), os.path.realpath(directory)
        state = (
            ""
            if os.path.isdir(resolved)
            else (", which does not exist" if not os.path.exists(resolved) else ", a file")
        )
        raise ArgumentError(
            f"{where}: {str(directory)!r} is a symbolic link to {target!r}{state}; expected a directory (new or "
            f"empty) that is not a link, so that no file is written elsewhere. To write there, pass {resolved!r}"
        )
    if directory.exists() and not directory.is_dir():
        raise ArgumentError(f"{where}: {str(directory)!r} is a file, expected a directory (new or empty)")
    if overwrite or not directory.is_dir():
        return directory
    present = sorted(p.name for p in directory.iterdir())
    if present:
        shown = ", ".join(present[:5]) + (f" and {len(present) - 5} more" if len(present) > 5 else "")
        raise ArgumentError(
            f"{where}: the directory {str(directory)!r} is not empty (it holds {shown}); expected a new or empty "
            "directory. Pass overwrite=True to replace the exported files in it (other files are kept)"
        )
    return directory
