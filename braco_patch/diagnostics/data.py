"""Image folders, labelled sets and seeded resamples for the diagnostics (paper App. "Functional rankings").

- :func:`list_images`: every image file under a folder (recursive, sorted), so LLaVA-Pretrain's nested
  ``images/00000/…`` layout works as is.
- :func:`load_labelled`: a labelled set from a JSONL file (``{"image": path relative to the images folder,
  "label": any JSON scalar}`` per line) or, without one, from class sub-folders (``DIR/<class>/*.jpg``).
- :func:`resample_indices`: the paper's calibration sampling, ``n`` images without replacement per seed
  (seeds ``seed, seed+1, …``; the paper uses 0/1/2).

Bad inputs raise :class:`InputError` (a ``ValueError``) with one sentence naming the bad value, and an image that
cannot or will not be decoded ``llava.mm_utils.ImageUnreadable``, the loaders' sentence; the commands print either
without a traceback.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["IMAGE_EXTENSIONS", "InputError", "list_images", "open_image", "LabelledSet", "load_labelled",
           "resample_indices", "split_indices"]

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")


class InputError(ValueError):
    """A user input the diagnostics cannot use; the message is one sentence naming it."""


def list_images(folder: str | Path) -> list[Path]:
    """Image files under ``folder`` (recursive), sorted by path."""
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"image folder {str(root)!r} does not exist or is not a folder")
    paths = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)
    if not paths:
        raise InputError(f"no images ({', '.join(IMAGE_EXTENSIONS)}) found under {str(root)!r}")
    return paths


def open_image(path: str | Path):
    """The image at ``path`` as an RGB ``PIL.Image``, opened by the one rule every LLaVA loader follows
    (:func:`llava.mm_utils.open_image`): a file with more pixels than PIL decodes safely is refused from its header,
    before its pixels are decoded, and an unreadable one is one sentence naming it (``ImageUnreadable``, a
    ``UserError``)."""
    from llava.mm_utils import open_image as open_checked

    return open_checked(Path(path))


@dataclass(frozen=True)
class LabelledSet:
    """Images with integer labels ``0..len(classes)-1``; ``classes[i]`` is the original label of class ``i``."""

    paths: list[Path]
    labels: np.ndarray
    classes: list[str]


def load_labelled(images: str | Path, labels: str | Path | None = None) -> LabelledSet:
    """A labelled set from a JSONL file (``labels``) or from the class sub-folders of ``images``."""
    root = Path(images)
    if not root.is_dir():
        raise InputError(f"image folder {str(root)!r} does not exist or is not a folder")
    pairs = _pairs_from_jsonl(root, Path(labels)) if labels is not None else _pairs_from_folders(root)
    classes = sorted({label for _, label in pairs})
    if len(classes) < 2:
        raise InputError(f"a probe needs at least 2 classes, found {len(classes)} ({classes}) in {str(labels or root)!r}")
    index = {c: i for i, c in enumerate(classes)}
    return LabelledSet([p for p, _ in pairs], np.array([index[c] for _, c in pairs], dtype=np.int64), classes)


def _pairs_from_jsonl(root: Path, labels: Path) -> list[tuple[Path, str]]:
    if not labels.is_file():
        raise InputError(f"labels file {str(labels)!r} does not exist")
    pairs = []
    for number, line in enumerate(labels.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            image, label = record["image"], record["label"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise InputError(f"{str(labels)!r} line {number} is not a JSON object with 'image' and 'label'") from None
        path = Path(image) if Path(image).is_absolute() else root / image
        if not path.is_file():
            raise InputError(f"{str(labels)!r} line {number} names image {str(path)!r}, which does not exist")
        pairs.append((path, str(label)))
    if not pairs:
        raise InputError(f"labels file {str(labels)!r} has no records")
    return pairs


def _pairs_from_folders(root: Path) -> list[tuple[Path, str]]:
    pairs = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        pairs += [(p, folder.name) for p in sorted(folder.rglob("*")) if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS]
    if not pairs:
        raise InputError(f"no labels file given and {str(root)!r} has no class sub-folders with images; "
                         "pass --labels FILE (JSONL with 'image' and 'label') or use DIR/<class>/<image>")
    return pairs


def resample_indices(total: int, n: int, resamples: int, seed: int = 0) -> list[np.ndarray]:
    """``resamples`` sorted index sets of ``min(n, total)`` images drawn without replacement, seeds ``seed + r``."""
    if total < 1 or n < 1 or resamples < 1:
        raise InputError(f"resampling needs images, n >= 1 and resamples >= 1; got {total} images, n={n}, resamples={resamples}")
    size = min(n, total)
    return [np.sort(np.random.default_rng(seed + r).choice(total, size=size, replace=False)) for r in range(resamples)]


def split_indices(labels: np.ndarray, val_fraction: float, test_fraction: float, seed: int = 0) -> dict[str, np.ndarray]:
    """Stratified ``train``/``val``/``test`` index split; every split gets at least one image of a class that has 3+."""
    if not (0 < val_fraction < 1 and 0 < test_fraction < 1 and val_fraction + test_fraction < 1):
        raise InputError(f"val and test fractions must be in (0, 1) and sum below 1, got {val_fraction} and {test_fraction}")
    rng = np.random.default_rng(seed)
    parts = {"train": [], "val": [], "test": []}
    for label in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == label))
        n_val = max(1, round(val_fraction * len(idx))) if len(idx) >= 3 else 0
        n_test = max(1, round(test_fraction * len(idx))) if len(idx) >= 3 else 0
        parts["val"] += idx[:n_val].tolist()
        parts["test"] += idx[n_val:n_val + n_test].tolist()
        parts["train"] += idx[n_val + n_test:].tolist()
    for name, idx in parts.items():
        if not idx:
            raise InputError(f"the {name} split is empty; the probe needs at least 3 images per class")
    return {name: np.sort(np.array(idx, dtype=np.int64)) for name, idx in parts.items()}
