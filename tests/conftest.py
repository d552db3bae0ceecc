"""Session-wide tiny models, built once per test run with ``llava.testing.tiny`` and saved to a temp dir.

Everything is loaded back through the same code a user runs with released weights (``load_pretrained_model``),
so the fixtures are directories, not in-memory objects.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

#: Markers deselected unless the ``-m`` expression names them: heavy or hardware-bound runs with their own make target.
OPT_IN_MARKERS = {
    "slow": "heavy end-to-end checks (lmms-eval, `make lmms-eval-check`)",
    "gpu": "CUDA paths (`make gpu-check`, scripts/gpu/check.sh on a GPU machine)",
    "vllm": "this project's checkpoints served by vLLM (`make vllm-check`, in its own virtualenv)",
}


def pytest_configure(config: pytest.Config) -> None:
    for name, description in OPT_IN_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {description}; deselected unless -m selects them")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the opt-in markers' tests unless the ``-m`` expression names the marker."""
    expression = config.getoption("markexpr") or ""
    for name in OPT_IN_MARKERS:
        if name in expression:
            continue
        dropped = [item for item in items if item.get_closest_marker(name)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if not item.get_closest_marker(name)]


#: The tiny tower's input side and patch size: a 6x6 grid, so mlp2x_gelu gives K = 36 visual tokens.
TOWER_IMAGE_SIZE = 48
TOWER_PATCH_SIZE = 8

#: The 21 mm_fourier_* keys an official Braco stage-2 config.json carries (braco-official §2), for C3/S7.
OFFICIAL_FOURIER_C3S7: dict[str, Any] = {
    "mm_fourier_C": 3,
    "mm_fourier_K_high": 0,
    "mm_fourier_temp_start": 1.2,
    "mm_fourier_temp_end": 0.8,
    "mm_fourier_temp_steps": 4677,
    "mm_fourier_temp_schedule": "cosine",
    "mm_fourier_use_polar_pe": True,
    "mm_fourier_polar_num_freqs": 8,
    "mm_fourier_polar_include_raw": False,
    "mm_fourier_polar_pe_scale_init": 0.1,
    "mm_fourier_spatial_keep": 7,
    "mm_fourier_spatial_method": "learned",
    "mm_fourier_spatial_use_norm": True,
    "mm_fourier_spatial_scale_init": 1.0,
    "mm_fourier_spatial_hidden_mult": 1,
    "mm_fourier_spatial_selection_norm": "sparsemax",
    "mm_fourier_spatial_temp_mul": 1.0,
    "mm_fourier_spatial_prior": "grad",
    "mm_fourier_spatial_prior_weight_init": 0.0,
    "mm_fourier_post_concat_norm": False,
    "mm_fourier_low_idct": False,
}

CheckpointFactory = Callable[..., Path]


@pytest.fixture(scope="session")
def tiny_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny_llava")


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tiny_root: Path) -> Path:
    from llava.testing.tiny import train_tiny_tokenizer

    return train_tiny_tokenizer(tiny_root / "tokenizer")


@pytest.fixture(scope="session")
def tiny_tower_dir(tiny_root: Path) -> Path:
    from llava.testing.tiny import build_tiny_clip_tower

    return build_tiny_clip_tower(tiny_root / "clip-tiny", image_size=TOWER_IMAGE_SIZE, patch_size=TOWER_PATCH_SIZE)


@pytest.fixture(scope="session")
def tiny_llava_checkpoint(tiny_root: Path, tiny_tower_dir: Path, tiny_tokenizer_dir: Path) -> CheckpointFactory:
    """``factory(projector_type="mlp2x_gelu", model_type="llava_llama", extra_config=None, hidden=64) -> checkpoint dir``.

    Each distinct argument set is built once per session; the directory name starts with ``llava-`` so the
    loader's name rules pick the full-checkpoint path.
    """
    from llava.testing.tiny import build_tiny_llava_checkpoint

    built: dict[str, Path] = {}

    def factory(
        projector_type: str = "mlp2x_gelu", model_type: str = "llava_llama", extra_config: Mapping[str, Any] | None = None,
        hidden: int = 64,
    ) -> Path:
        key = json.dumps([projector_type, model_type, dict(extra_config or {}), hidden], sort_keys=True)
        if key not in built:
            name = f"llava-tiny-{projector_type}-{model_type}-{len(built)}"
            built[key] = build_tiny_llava_checkpoint(
                tiny_root / name, tiny_tower_dir, tiny_tokenizer_dir, projector_type=projector_type,
                model_type=model_type, extra_config=extra_config, hidden=hidden,
            )
        return built[key]

    return factory


@pytest.fixture(scope="session")
def tiny_base_llm(tiny_root: Path, tiny_tokenizer_dir: Path) -> Path:
    """A plain LLaMA checkpoint (the Vicuna stand-in that stage-1 outputs are loaded onto)."""
    from llava.testing.tiny import build_tiny_llm

    return build_tiny_llm(tiny_root / "vicuna-tiny", tiny_tokenizer_dir)


@pytest.fixture(scope="session")
def tiny_projector_checkpoint(tiny_root: Path, tiny_base_llm: Path, tiny_tower_dir: Path) -> CheckpointFactory:
    """``factory(projector_type="mlp2x_gelu", file_format="bin") -> stage-1 dir`` (config.json + mm_projector.*)."""
    from llava.testing.tiny import build_tiny_projector_checkpoint

    built: dict[tuple[str, str], Path] = {}

    def factory(projector_type: str = "mlp2x_gelu", file_format: str = "bin") -> Path:
        key = (projector_type, file_format)
        if key not in built:
            name = f"llava-tiny-pretrain-{projector_type}-{file_format}"
            built[key] = build_tiny_projector_checkpoint(
                tiny_root / name, tiny_base_llm, tiny_tower_dir, projector_type=projector_type, file_format=file_format
            )
        return built[key]

    return factory


@pytest.fixture(scope="session")
def tiny_image_file(tiny_root: Path) -> Path:
    """A 40x30 RGB PNG (not square, so ``image_aspect_ratio: pad`` matters)."""
    from PIL import Image

    image = Image.new("RGB", (40, 30), (200, 40, 30))
    image.paste((250, 250, 250), (4, 4, 18, 14))
    path = tiny_root / "red.png"
    image.save(path)
    return path


@pytest.fixture
def read_only_under(monkeypatch: pytest.MonkeyPatch) -> Callable[[Path], Path]:
    """``read_only_under(folder)`` makes ``folder`` (created if needed) behave like a read-only file system for the
    output guard and the atomic writers, which create every file through ``tempfile.mkstemp``; returns ``folder``."""
    import errno
    import tempfile

    real = tempfile.mkstemp
    folders: list[str] = []

    def mkstemp(*args: Any, **kwargs: Any):
        if any(str(kwargs.get("dir", "")).startswith(folder) for folder in folders):
            raise OSError(errno.EROFS, "Read-only file system")
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)

    def make(folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        folders.append(str(folder))
        return folder

    return make
