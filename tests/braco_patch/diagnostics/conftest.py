"""Shared data for the diagnostics tests: real photographs as token grids, a correlated field, a tiny CLIP tower
and image folders on disk (built once per session)."""

import math

import numpy as np
import pytest
import torch

#: Every photograph bundled with scikit-image (no download) — all of them, none picked for the outcome.
PHOTOS = ("astronaut", "camera", "coffee", "chelsea", "rocket", "coins", "moon", "clock", "brick", "grass", "gravel",
          "hubble_deep_field", "immunohistochemistry", "retina", "cell", "page", "text")


def photo(name: str, size: int) -> np.ndarray:
    """RGB float ``[size, size, 3]`` in [0, 1]."""
    from PIL import Image
    from skimage import data

    a = getattr(data, name)()
    if a.ndim == 2:
        a = np.stack([a] * 3, -1)
    image = Image.fromarray(np.ascontiguousarray(a[..., :3])).resize((size, size), Image.BICUBIC)
    return np.asarray(image, dtype=np.float64) / 255.0


def patch_grid(image: np.ndarray, patch: int) -> torch.Tensor:
    """``[H, W, 3]`` -> ``[(H/p)·(W/p), p·p·3]`` patch vectors, row-major over the lattice."""
    n = image.shape[0] // patch
    x = torch.from_numpy(image[: n * patch, : n * patch]).reshape(n, patch, n, patch, 3).permute(0, 2, 1, 3, 4)
    return x.reshape(n * n, patch * patch * 3)


CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@pytest.fixture(scope="session")
def photo_tokens():
    """All bundled photographs at 336 px, normalised with CLIP's mean/std, through a fixed (seeded, random linear)
    14 x 14 patch embedding: ``[17, 576, 48]`` float64, the 24 x 24 grid of CLIP-L/14-336."""
    gen = torch.Generator().manual_seed(0)
    embed = torch.randn(14 * 14 * 3, 48, generator=gen, dtype=torch.float64) / math.sqrt(14 * 14 * 3)
    mean, std = np.array(CLIP_MEAN), np.array(CLIP_STD)
    return torch.stack([patch_grid((photo(name, 336) - mean) / std, 14) @ embed for name in PHOTOS])


@pytest.fixture(scope="session")
def correlated_field():
    """Zero-mean stationary Gaussian field on a 16 x 16 lattice with covariance exp(-dist/2): ``[64, 256, 32]``."""
    n = 16
    u, v = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    points = torch.stack([u.reshape(-1), v.reshape(-1)], 1).double()
    chol = torch.linalg.cholesky(torch.exp(-torch.cdist(points, points) / 2.0))
    gen = torch.Generator().manual_seed(1)
    return chol @ torch.randn(64, n * n, 32, generator=gen, dtype=torch.float64)


def second_moment(x: torch.Tensor) -> torch.Tensor:
    """``E[X Xᵀ]`` over samples, written out directly."""
    return torch.einsum("sld,smd->lm", x.double(), x.double()) / x.shape[0]


def random_moment(n: int, seed: int = 0, dim: int = 8, samples: int = 20) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return second_moment(torch.randn(samples, n * n, dim, generator=gen, dtype=torch.float64))


@pytest.fixture(scope="session")
def tiny_tower(tmp_path_factory):
    """A random CLIP tower (48 px, patch 8 -> 6 x 6 grid + CLS, width 32, 2 layers) with its processor."""
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    folder = tmp_path_factory.mktemp("tiny_clip")
    torch.manual_seed(0)
    config = CLIPVisionConfig(image_size=48, patch_size=8, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4)
    CLIPVisionModel(config).save_pretrained(folder)
    CLIPImageProcessor(size={"shortest_edge": 48}, crop_size={"height": 48, "width": 48}).save_pretrained(folder)
    return folder


def _synthetic(rng, size=64, centre=None):
    yy, xx = np.mgrid[0:size, 0:size] / size
    image = rng.uniform(0.2, 0.5) + 0.1 * rng.standard_normal((size, size, 3))
    cy, cx = centre if centre is not None else rng.uniform(0.2, 0.8, 2)
    blob = np.exp(-((yy - cy - 0.05 * rng.standard_normal()) ** 2 + (xx - cx - 0.05 * rng.standard_normal()) ** 2) / 0.01)
    return np.clip(image + 0.6 * blob[..., None] * rng.uniform(0.5, 1.0, 3), 0, 1)


def _save(array: np.ndarray, path) -> None:
    from PIL import Image

    Image.fromarray((array * 255).astype(np.uint8)).save(path)


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory):
    """12 images: 8 scikit-image photographs and 4 synthetic scenes (one in a sub-folder), PNG and JPEG."""
    folder = tmp_path_factory.mktemp("images")
    for name in PHOTOS[:8]:
        _save(photo(name, 96), folder / f"{name}.png")
    (folder / "synthetic").mkdir()
    rng = np.random.default_rng(0)
    for i in range(4):
        _save(_synthetic(rng), folder / "synthetic" / f"scene{i}.jpg")
    return folder


@pytest.fixture(scope="session")
def labelled_folder(tmp_path_factory):
    """Class sub-folders: 3 classes of 10 synthetic scenes each, told apart by where a bright blob sits."""
    folder = tmp_path_factory.mktemp("labelled")
    rng = np.random.default_rng(1)
    for c, centre in enumerate([(0.3, 0.3), (0.7, 0.7), (0.3, 0.7)]):
        (folder / f"class{c}").mkdir()
        for i in range(10):
            _save(_synthetic(rng, centre=centre), folder / f"class{c}" / f"{i}.png")
    return folder
