"""The ``mithril`` command: ``mithril demo``, ``mithril plugins``, ``mithril export``, ``mithril export-model``
and ``mithril graph``."""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import sys
from typing import Any

from . import validation
from .compiler.compile import compile as compile_model
from .demo import DemoFailed, run_demo
from .display import plot, to_dot
from .errors import ArgumentError, BackendNotAvailableError
from .framework.model import Model
from .plugins import list as list_plugins
from .plugins.lookup import backend_class, model_builder
from .plugins.manager import BrokenPlugin, manager
from .types import Dtype

__all__ = ["main"]


def _plugins(_: argparse.Namespace) -> int:
    for plugin in list_plugins():
        if isinstance(plugin, BrokenPlugin):
            print(f"BROKEN  {plugin.name:<14} {plugin.distribution} {plugin.version}: {plugin.error}")
        else:
            print(f"loaded  {plugin.name:<14} {plugin.distribution} {plugin.version} ({plugin.module})")
    reg = manager().registry
    print(f"backends: {', '.join(sorted(reg.backends)) or 'none'}")
    print(
        f"primitives: {len(reg.primitives)}; generic gradient rules: {len(reg.gradients)}; model builders: "
        f"{len(reg.models)}"
    )
    disabled = manager().disabled
    if disabled:
        print(f"disabled by MITHRIL_DISABLE_PLUGINS: {', '.join(sorted(disabled))}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    try:
        run_demo(steps=args.steps, lr=args.lr, plot=args.plot)
    except DemoFailed:
        return 1
    return 0


def _export(args: argparse.Namespace) -> int:
    model, shapes = _model_and_shapes(args, "export")
    backend = backend_class(args.backend)(dtype=Dtype.parse(args.dtype))
    pm = compile_model(model, backend, shapes=shapes, inference=True)
    if args.params:
        result = pm.export(args.output, pm.load_params(args.params), overwrite=args.overwrite)
    else:
        result = pm.export(args.output, randomize=True, seed=args.seed, overwrite=args.overwrite)
    print(f"exported {args.model} ({pm.primitive_count} primitive calls)")
    print(result.summary() if hasattr(result, "summary") else f"to {result}")
    return 0


def _model_and_shapes(args: argparse.Namespace, command: str) -> tuple[Any, dict[str, list[int]]]:
    """The model named by ``module:attribute`` (a Model or a function returning one) and the
    ``--shape KEY=D1,D2,...`` options, checked before any model is built."""
    shapes = _shapes(args.shape, command)
    return _load_model(args.model, command), shapes


def _load_model(target: str, command: str) -> Any:
    """``module:attribute``: a Model, or a function returning one (called without arguments). Anything else is
    an :class:`ArgumentError` naming what was found; errors raised by the user's own code propagate.

    >>> _load_model("mithril.demo:build_cnn", "graph").input_keys[:1]
    ['input']
    """
    module_name, colon, attribute = target.partition(":")
    if not colon or not module_name or not attribute or module_name.startswith("."):
        accepted = "'module:attribute' (a Model, or a function returning one, in module.py; an absolute module name)"
        raise ArgumentError(f"mithril {command}: MODEL must be {accepted}, got {target!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name and not module_name.startswith(f"{exc.name}."):
            raise  # the module was found, and it imports something that is missing
        raise ArgumentError(
            f"mithril {command} {target}: cannot import module {module_name!r} ({exc}); run from the directory "
            "holding it or add that directory to PYTHONPATH"
        ) from None
    if not hasattr(module, attribute):
        found = [name for name, value in sorted(vars(module).items()) if _is_builder(value, module.__name__)]
        raise ArgumentError(
            f"mithril {command} {target}: module {module_name!r} has no attribute {attribute!r}; its models and "
            f"functions: {', '.join(found) or 'none'}"
        )
    builder = getattr(module, attribute)
    if isinstance(builder, Model):  # a Model is callable too: use it as it is
        return builder
    if not callable(builder):
        raise validation.fail(f"mithril {command}", f"MODEL {target}", "a Model or a function returning one", builder)
    model = builder()
    if not isinstance(model, Model):
        raise validation.fail(f"mithril {command}", f"what {target}() returns", "a Model", model)
    return model


def _is_builder(value: Any, module: str) -> bool:
    """A Model, or a public function defined in ``module``: what ``module:attribute`` may name."""
    is_function = inspect.isfunction(value) and value.__module__ == module and not value.__name__.startswith("_")
    return isinstance(value, Model) or is_function


def _shapes(items: list[str], command: str) -> dict[str, list[int]]:
    """``--shape KEY=D1,D2,...`` options as ``{KEY: [D1, D2, ...]}``.

    >>> _shapes(["input=1,3,32,32"], "graph")
    {'input': [1, 3, 32, 32]}
    """
    shapes = {}
    for item in items:
        key, equals, dims = item.partition("=")
        try:
            shape = [int(d) for d in dims.split(",")]
        except ValueError:
            shape = []
        if not equals or not key or not shape or min(shape) < 0:
            accepted = "KEY=D1,D2,... (non-negative ints, e.g. input=1,3,32,32)"
            raise ArgumentError(f"mithril {command}: --shape must be {accepted}, got {item!r}")
        shapes[key] = shape
    return shapes


def _graph(args: argparse.Namespace) -> int:
    model, shapes = _model_and_shapes(args, "graph")
    if shapes:
        model.set_shapes(shapes)
    if args.output is None:
        print(to_dot(model, args.depth, params=not args.no_params))
    else:
        print(f"wrote {plot(model, args.output, args.depth, params=not args.no_params)}")
    return 0


def _export_model(args: argparse.Namespace) -> int:
    try:  # mithril-models registers it as a builder: core never imports a plugin package
        export_program = model_builder("export_program")
    except (ImportError, AttributeError):
        raise BackendNotAvailableError(
            'mithril export-model needs mithril-models: pip install "mithril-core[models]"'
        ) from None
    try:
        with open(args.config, encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ArgumentError(
            f"mithril export-model --config {args.config}: expected a readable JSON file ({exc})"
        ) from None
    options = {
        "cache_len": args.cache_len,
        "image_size": args.image_size,
        "quantize": args.quantize,
        "prefill_chunk": args.prefill_chunk,
        "overwrite": args.overwrite,
    }
    result = export_program(config, args.weights, args.out, **options)
    print(f"wrote {result.directory}: {', '.join(result.files)}")
    print(f"build: make -C {result.directory} (or sh {result.directory}/build.sh) -> {result.binary}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``mithril`` command line: one subcommand per tool (``demo``, ``export``, ``graph``, ...).

    >>> build_parser().parse_args(["demo", "--steps", "5"]).steps
    5
    """
    parser = argparse.ArgumentParser(prog="mithril", description="Mithril: compose once, compile anywhere.")
    parser.add_argument("--traceback", action="store_true", help="show the full traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train the seeds' MLP on every installed backend and compare")
    demo.add_argument("--steps", type=int, default=300)
    demo.add_argument("--lr", type=float, default=0.1)
    demo.add_argument(
        "--plot", metavar="PATH", help="also write every backend's loss curve to PATH (PNG/SVG/PDF; needs matplotlib)"
    )
    demo.set_defaults(func=_demo)
    export = sub.add_parser("export", help="compile a model for a native backend and write a standalone program")
    export.add_argument("model", help="module:attribute of a Model or a function returning one")
    export.add_argument("output", help="directory to write (model.c, model.h, weights, main.c)")
    export.add_argument("--shape", action="append", default=[], metavar="KEY=D1,D2,...", help="input shape, repeatable")
    export.add_argument("--backend", default="c")
    export.add_argument("--dtype", default="float32")
    export.add_argument("--params", help="parameters saved with save_params (.npz or .safetensors); random otherwise")
    export.add_argument("--seed", type=int, default=0, help="seed of the random parameters when --params is not given")
    export.add_argument("--overwrite", action="store_true", help="write into a non-empty output directory")
    export.set_defaults(func=_export)
    graph = sub.add_parser("graph", help="draw a model's graph (SVG/PNG/PDF with Graphviz, or DOT text)")
    graph.add_argument("model", help="module:attribute of a Model or a function returning one")
    graph.add_argument("--shape", action="append", default=[], metavar="KEY=D1,D2,...", help="input shape, repeatable")
    graph.add_argument("-o", "--output", help="picture to write (.svg, .png or .pdf); DOT text on stdout otherwise")
    graph.add_argument("--depth", type=int, default=None, help="levels of blocks to open (default 3)")
    graph.add_argument("--no-params", action="store_true", help="leave parameters out of the picture")
    graph.set_defaults(func=_graph)
    edge = sub.add_parser(
        "export-model", help="a GPT-2, Llama, Mistral or ResNet checkpoint as a standalone C program (mithril-models)"
    )
    edge.add_argument(
        "--config",
        required=True,
        help="config.json: Hugging Face (model_type gpt2/llama/mistral/resnet) or {family: ...}",
    )
    edge.add_argument("--weights", required=True, help="the checkpoint: .safetensors file or save_pretrained directory")
    edge.add_argument("--out", required=True, help="directory to write (main.c, model.c, weights.bin, Makefile)")
    edge.add_argument(
        "--cache-len", type=int, default=None, help="decoders: KV-cache slots (default: the context length)"
    )
    edge.add_argument(
        "--quantize", choices=("q8_0", "q4_0"), default=None, help="block-quantized weights (ggml formats)"
    )
    edge.add_argument("--prefill-chunk", type=int, default=32, help="decoders: prompt tokens per prefill step")
    edge.add_argument("--image-size", type=int, default=224, help="ResNet: image height and width (default 224)")
    edge.add_argument("--overwrite", action="store_true", help="write into a non-empty output directory")
    edge.set_defaults(func=_export_model)
    plugins = sub.add_parser("plugins", help="list loaded and broken plugins")
    plugins.set_defaults(func=_plugins)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mithril`` console script."""
    args = build_parser().parse_args(argv)
    if "" not in sys.path and os.getcwd() not in sys.path:  # `mithril export my_model:build` finds ./my_model.py
        sys.path.insert(0, os.getcwd())
    try:
        return int(args.func(args))
    except (Exception, KeyboardInterrupt) as exc:  # one readable line; --traceback for the whole story
        if args.traceback:
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(
            f"mithril {args.command}: error: {type(exc).__name__}: {message} (run with --traceback for details)",
            file=sys.stderr,
        )
        return 130 if isinstance(exc, KeyboardInterrupt) else 1


if __name__ == "__main__":
    sys.exit(main())
