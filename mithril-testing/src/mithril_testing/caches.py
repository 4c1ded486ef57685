"""Damage a cached build product the ways a crash, a full disk or a concurrent writer leave one, for tests that
a backend's cache (the C backend's compiled parts and libraries, each with a ``<entry>.meta`` record of its size
and hash) rebuilds it instead of loading it.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> entry = Path(tempfile.mkdtemp()) / "model.so"
    >>> _ = entry.write_bytes(b"123456")
    >>> damage_entry(entry, "truncate"), entry.read_bytes()
    (b'123456', b'12')
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DAMAGES", "damage_entry"]

DAMAGES = ("truncate", "empty", "no-record")
"""``truncate``: the first third of the entry is left; ``empty``: nothing is; ``no-record``: the entry is whole
but its ``.meta`` record is gone."""


def damage_entry(entry: Path, damage: str) -> bytes:
    """Damage ``entry`` as ``damage`` (one of :data:`DAMAGES`) says; its bytes before."""
    data = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(data[: len(data) // 3])
    elif damage == "empty":
        entry.write_bytes(b"")
    elif damage == "no-record":
        entry.with_name(entry.name + ".meta").unlink()
    else:
        raise ValueError(f"damage_entry: damage must be one of {DAMAGES}, got {damage!r}")
    return data
