# Fresh virtualenv with the CPU build of PyTorch, then the project (editable) with its dev extra.
# On a GPU machine: make install TORCH="torch>=2.4" (or install your CUDA build of torch first).
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin

.PHONY: install demo quickstart test lint bench lmms-eval-check gpu-check clean

$(BIN)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

install: $(BIN)/.installed

demo: install
	$(BIN)/braco demo --out outputs/demo

# Tiny LLaVA, stage 1 + stage 2 for mlp2x_gelu and Braco, held-out answers, table + figure (CPU, a few minutes).
# CI runs it with QUICKSTART_ARGS=--reduced, then QUICKSTART_ARGS="--reduced --backbone qwen2-siglip" (Qwen2 + SigLIP).
QUICKSTART_ARGS ?=
quickstart: install
	$(BIN)/python -m llava.quickstart --out outputs/quickstart $(QUICKSTART_ARGS)

test: install
	$(BIN)/python -m pytest -q tests

# ruff with the pinned configuration in ruff.toml (line length, import order, unused and undefined names).
lint: install
	$(BIN)/python -m ruff check .

bench: install
	$(BIN)/braco cost --measure --device cpu --parts boundary --json outputs/bench_boundary.json

# lmms-eval 0.7.3 end to end on tiny checkpoints (--model llava on a Braco one; --model llava_onevision on an image and
# a video task), in its own virtualenv (lmms-eval pins wandb, hence protobuf < 7, which must not leak into the main
# one; its llava_onevision module imports decord, which its video-legacy extra brings). See README, "lmms-eval".
LMMS_VENV ?= .venv-lmms-eval
$(LMMS_VENV)/.installed: setup.py
	$(PYTHON) -m venv $(LMMS_VENV)
	$(LMMS_VENV)/bin/python -m pip install --quiet "$(TORCH)"
	$(LMMS_VENV)/bin/python -m pip install --quiet -e ".[dev]" "lmms-eval[video-legacy]==0.7.3"
	touch $@

lmms-eval-check: $(LMMS_VENV)/.installed
	$(LMMS_VENV)/bin/python -m pytest -q -m slow tests/lmms_eval

# The CUDA paths and GPU benchmarks (issues 15 and 29), on a machine with a GPU and a CUDA build of torch in the active
# python3 (not the CPU venv above); results in outputs/gpu. See README, "GPU check".
gpu-check:
	bash scripts/gpu/check.sh

# Removes the virtualenvs and, under outputs/, only what this project's commands wrote: folders marked as ours
# (.llava-output: llava.outputs and scripts/gpu/check.sh; .llava-quickstart: the quickstart), outputs/demo when it
# holds nothing but the braco demo's demo.png/demo.json, and make bench's JSON. Anything else there is yours: it
# is kept, and named.
clean:
	rm -rf $(VENV) $(LMMS_VENV) .pytest_cache
	rm -f outputs/bench_boundary.json
	@for dir in outputs/*/ outputs/.[!.]*/; do \
	    [ -d "$$dir" ] || continue; dir=$${dir%/}; \
	    if [ -f "$$dir/.llava-output" ] || [ -f "$$dir/.llava-quickstart" ] || \
	       { [ "$$dir" = outputs/demo ] && [ -z "$$(ls -A "$$dir" | grep -vxE 'demo\.(png|json)')" ]; }; then \
	        echo "rm -rf $$dir"; rm -rf "$$dir"; \
	    else \
	        echo "kept $$dir (not written by this project's commands: no .llava-output marker)"; \
	    fi; \
	done
	@rmdir outputs 2>/dev/null || true
