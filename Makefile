# The two quick-start commands: `make demo` and `make test`. Both build .venv from scratch when needed.
# `make docs` builds the documentation site (strict) into site/; `make lint` runs ruff, mypy (strict, every package) and lint-imports.
PYTHON ?= python3
VENV := .venv
PIP := $(VENV)/bin/python -m pip install --disable-pip-version-check -q -c constraints.txt
# ggml-python builds libggml from source: with llamafile's matrix-product kernels (off in its default build;
# GPT-2's forward on the GGML backend 22% faster), and never from a wheel cached by a build without them.
GGML_PYTHON := CMAKE_ARGS="-DGGML_LLAMAFILE=ON" $(PIP) --no-cache-dir --no-binary ggml-python ggml-python
PACKAGES := $(foreach p,mithril-core mithril-testing mithril-backend-numpy mithril-backend-jax mithril-backend-torch mithril-backend-mlx mithril-backend-c mithril-backend-ggml mithril-models,$(if $(wildcard $(p)/pyproject.toml),-e $(p)))

.PHONY: demo test docs lint install clean gpu-check

$(VENV)/.installed: constraints.txt $(wildcard */pyproject.toml) pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(GGML_PYTHON)
	$(PIP) $(PACKAGES)
	$(PIP) --group dev
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/mithril plugins
	$(VENV)/bin/mithril demo

test: install
	$(VENV)/bin/python -m pytest

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The GPU check (docs/backends/gpu.md): conformance, GPT-2 and ResNet-18 ratios on the GPU, recorded on that page.
gpu-check: install
	$(VENV)/bin/python bench/gpu_check.py --record docs/backends/gpu.md

clean:
	rm -rf $(VENV)
