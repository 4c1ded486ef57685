"""Edge deployment: a GPT-2, Llama/Mistral or ResNet as a standalone C program that needs only a C compiler
and ``-lm``.

:func:`export_program` writes the folder (model code from the C backend, ``main.c``, an mmap-able
``weights.bin`` with a checked header, ``build.sh`` and ``Makefile``); ``make -C out_dir`` builds
``out_dir/generate`` (GPT-2, Llama, Mistral: prints generated token ids) or ``out_dir/classify`` (ResNet:
prints the top-5 classes). ``quantize="q8_0" | "q4_0"`` stores the weights in ggml's block formats
(multiplied by the C runtime's quantized kernels), and a ``generate`` program processes the prompt in
prefill steps of ``prefill_chunk`` tokens. See the package README, "Edge deployment".

Example:
    >>> from mithril_models import export_program
    >>> from transformers import GPT2Config                                         # doctest: +SKIP
    >>> export_program(GPT2Config(), "model.safetensors", "gpt2-edge").build()      # doctest: +SKIP
    PosixPath('gpt2-edge/generate')
"""

from .program import ExportedProgram, export_program, resolve_model
from .weights import read_weights, write_weights

__all__ = ["ExportedProgram", "export_program", "read_weights", "resolve_model", "write_weights"]
