"""Partitioned entry points: functions that compute one part of their work per call (``(args, nt, part,
nparts)``), for callers that run every part on a thread of their own (ggml custom ops).

Code runs as independent parts only when it is one loop split one way: one unit (nothing makes a part
wait for the other parts between two units, so a part of the second would read values the first has not
written), emitted as exactly one parallel region (:meth:`~mithril_backend_c.context.Ctx.parallel`), and no
return copied after it. The checks raise :class:`NotPartitionable`; :func:`entry_head` writes the entry
point's signature and workspace prologue, partitioned or not.

Example:
    >>> check_units(["conv2d @ c1 + relu"])
    >>> entry_head("mg0_kernel", 0, partitioned=True, max_parts=2)[0]
    'int mg0_kernel(const mg0_kernel_args *a, int nt, long mt_part, long mt_nparts) {'
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["NotPartitionable", "check_copies", "check_region", "check_units", "entry_head"]


class NotPartitionable(Exception):
    """``generate_c(partitioned=True)`` was asked for code that does not run as independent parts."""


def check_units(labels: Sequence[str]) -> None:
    """Refuse more than one unit (``labels``: what each unit computes).

    >>> check_units(["add", "relu"])
    Traceback (most recent call last):
    ...
    mithril_backend_c.partitioning.NotPartitionable: 2 units (add, relu) run one after another
    """
    if len(labels) > 1:
        raise NotPartitionable(f"{len(labels)} units ({', '.join(labels)}) run one after another")


def check_region(label: str, one_region: bool) -> None:
    """Refuse a unit whose code is not exactly one parallel region."""
    if not one_region:
        raise NotPartitionable(f"{label} does not run as independent parts")


def check_copies(copies: Sequence[tuple[str, int]]) -> None:
    """Refuse returns that would be copied after the unit (``(key, bytes)`` of each copy)."""
    for key, nbytes in copies:
        if nbytes:
            raise NotPartitionable(f"output {key!r} would be a copy")


def entry_head(symbol: str, workspace: int, *, partitioned: bool, max_parts: int) -> tuple[str, list[str]]:
    """The signature of entry point ``symbol`` and its prologue: the workspace (the caller's, else
    ``malloc``-ed for this call, which a partitioned entry point never does: every part runs on the same
    caller-provided workspace) and, when partitioned, the parts beyond ``max_parts`` returning at once.

    >>> entry_head("mithril_evaluate", 64, partitioned=False, max_parts=1)[1][-1]
    '    mt_blas_serial();'
    """
    if partitioned:
        signature = f"int {symbol}(const {symbol}_args *a, int nt, long mt_part, long mt_nparts) {{"
        return signature, [
            "    char *ws = (char *)a->workspace, *ws_own = NULL;",
            f"    if (ws == NULL && {workspace} > 0) return MT_ERR_ALLOC;",
            f"    if (mt_nparts > {max_parts}) {{",
            f"        if (mt_part >= {max_parts}) return 0;",
            f"        mt_nparts = {max_parts};",
            "    }",
        ]
    return f"int {symbol}(const {symbol}_args *a, int nt) {{", [
        "    char *ws = (char *)a->workspace, *ws_own = NULL;",
        f"    if (ws == NULL && {workspace} > 0) {{",
        f"        ws = ws_own = (char *)malloc({workspace});",
        "        if (ws == NULL) return MT_ERR_ALLOC;",
        "    }",
        "    mt_blas_serial();",
    ]
