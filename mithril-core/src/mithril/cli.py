"""The ``mithril`` command: ``mithril demo`` and ``mithril plugins``."""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def _plugins(_: argparse.Namespace) -> int:
    from .plugins import list as list_plugins
    from .plugins.manager import BrokenPlugin, manager

    for plugin in list_plugins():
        if isinstance(plugin, BrokenPlugin):
            print(f"BROKEN  {plugin.name:<14} {plugin.distribution} {plugin.version}: {plugin.error}")
        else:
            print(f"loaded  {plugin.name:<14} {plugin.distribution} {plugin.version} ({plugin.module})")
    reg = manager().registry
    print(f"backends: {', '.join(sorted(reg.backends)) or 'none'}")
    print(f"primitives: {len(reg.primitives)}; generic gradient rules: {len(reg.gradients)}; model builders: {len(reg.models)}")
    disabled = manager().disabled
    if disabled:
        print(f"disabled by MITHRIL_DISABLE_PLUGINS: {', '.join(sorted(disabled))}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(steps=args.steps, lr=args.lr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mithril`` console script."""
    parser = argparse.ArgumentParser(prog="mithril", description="Mithril: compose once, compile anywhere.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train the seeds' MLP on every installed backend and compare")
    demo.add_argument("--steps", type=int, default=300)
    demo.add_argument("--lr", type=float, default=0.1)
    demo.set_defaults(func=_demo)
    plugins = sub.add_parser("plugins", help="list loaded and broken plugins")
    plugins.set_defaults(func=_plugins)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
