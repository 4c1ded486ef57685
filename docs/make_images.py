"""Make the pictures under docs/images/ (run from the repository root: ``.venv/bin/python docs/make_images.py``).

- ``gpt2-summary.png``: ``summary()`` of GPT-2 small, as rich draws it in a terminal;
- ``cnn-graph.png`` and ``cnn-graph.svg``: the seeds' CNN compiled for NumPy, drawn by ``pm.plot``;
- ``c-compile-progress.png``: the progress line a C compile shows on a terminal (the compile runs in a
  pseudo-terminal, so Mithril shows progress exactly as it does for a user).

Terminal output becomes a picture through rich's SVG export, which headless Chromium (Debian's ``chromium``)
screenshots to PNG. Needs: rich, graphviz (Python package and ``dot``), chromium, mithril-models,
mithril-backend-numpy and mithril-backend-c.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

IMAGES = Path(__file__).resolve().parent / "images"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium() -> str:
    """The headless browser used for screenshots (Debian: ``apt-get install chromium``)."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit("make_images: no chromium on PATH (apt-get install chromium)")


def screenshot(url: str, png: Path, width: int, height: int) -> None:
    """Headless Chromium's screenshot of ``url`` at ``width`` x ``height`` CSS pixels."""
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={profile}",
             f"--window-size={width},{height}", f"--screenshot={png}", url],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip


def terminal_png(renderable: object, png: Path, *, title: str, width: int = 120) -> None:
    """Draw a rich renderable as a terminal window (rich's SVG export) and screenshot it to PNG."""
    from rich.console import Console

    console = Console(
        record=True, width=width, file=open(os.devnull, "w"), force_terminal=True, color_system="truecolor"
    )
    console.print(renderable)
    svg = console.export_svg(title=title)
    view = re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg)
    w, h = (int(float(view.group(1))) + 1, int(float(view.group(2))) + 1) if view else (1200, 800)
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "terminal.html"
        page.write_text(f"<!doctype html><html><body style='margin:0;background:#fff'>{svg}</body></html>")
        screenshot(page.as_uri(), png, w, h)


def gpt2_summary() -> None:
    from mithril.display import summarize
    from mithril_models import create_gpt

    gpt2 = create_gpt(bias=True, block_size=1024, dims=768, num_heads=12, num_layers=12, vocab_size=50257)
    terminal_png(summarize(gpt2, depth=2).rich(), IMAGES / "gpt2-summary.png", title="gpt2.summary(depth=2)", width=150)


def cnn_graph() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mithril-core" / "tests"))
    import mithril as ml
    from conftest import build_seed_cnn

    pm = ml.compile(build_seed_cnn(), ml.NumpyBackend(), shapes={"input": [32, 3, 32, 32]})
    pm.plot(IMAGES / "cnn-graph.svg")
    pm.plot(IMAGES / "cnn-graph.png")


COMPILE = """
import os, tempfile
import mithril as ml
from mithril_models import create_gpt
gpt = create_gpt(bias=True, block_size=1024, dims=768, num_heads=12, num_layers=12, vocab_size=50257)  # GPT-2 small
pm = ml.compile(gpt, ml.CBackend(), shapes={"input": [1, 64]}, inference=True)
os.environ["MITHRIL_C_CACHE"] = tempfile.mkdtemp()  # an empty cache: the build below compiles everything again
pm.program.build("CBackend: compiling GPT", verbose=True)  # verbose: shown at once, not after 2 s
"""


def c_compile_progress() -> None:
    """Run a C compile (into an empty cache, so it really compiles) in a pseudo-terminal, where Mithril
    shows progress as it does for a user; keep the last progress line before the compile finished."""
    from rich.text import Text

    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "MITHRIL_PROGRESS": "1", "MITHRIL_C_CACHE": cache, "COLUMNS": "110"}
        pid, fd = pty.fork()
        if pid == 0:  # the child: stdout/stderr are the terminal, 110 columns wide (a new one has 0)
            fcntl.ioctl(sys.stdout.fileno(), termios.TIOCSWINSZ, struct.pack("HHHH", 30, 110, 0, 0))
            os.execve(sys.executable, [sys.executable, "-c", COMPILE], env)
        output, started = b"", time.monotonic()
        while time.monotonic() - started < 600:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        os.waitpid(pid, 0)
    frames = [f for f in re.split(rb"[\r\n]", output) if b"CBackend: compiling" in f and b"%" in f]
    if not frames:
        raise SystemExit(f"make_images: the C compile showed no progress (output: {output[-500:]!r})")
    running = [f for f in frames if b"100%" not in f]  # mid-compile if the terminal caught such a frame
    line = (running or frames)[-1].decode("utf-8", "replace")
    title = "GPT-2 small: the C backend compiling (a terminal)"
    terminal_png(Text.from_ansi(line), IMAGES / "c-compile-progress.png", title=title, width=110)


def main() -> None:
    IMAGES.mkdir(exist_ok=True)
    wanted = sys.argv[1:] or ["summary", "graph", "progress"]
    steps = {"summary": gpt2_summary, "graph": cnn_graph, "progress": c_compile_progress}
    for name in wanted:
        steps[name]()
        print(f"made {name}")


if __name__ == "__main__":
    main()
