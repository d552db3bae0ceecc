"""``braco demo``: what the coder keeps of a real photograph, for every budget.

    braco demo [--image PATH] [--out DIR] [--budgets 4 9 16 25] [--image-size 336] [--patch 14]

The image is cut into a 24 x 24 grid of 14 x 14 patches (CLIP-L/14 at 336 px); each patch, normalised
with CLIP's mean and std, is one token (a fixed, linear patch embedding, so no download is needed). For
every budget the command runs a :class:`BracoCoder` and reports the share of token energy that the DCT
backbone keeps next to the same number of spatial tokens (paper §4.1), draws the low-pass view the
backbone keeps, and the residual tokens' sparsemax maps. The scorer is untrained: its prior weight is set
to 1 so the maps show the gradient-energy prior steering selection towards detail.

Outputs in ``--out``: ``demo.png`` and ``demo.json``.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np
import torch

from llava.outputs import atomic_folder, guard_outputs, write_json
from llava.utils import UserError

from .argtypes import positive_int
from .basis import dct_matrix, lattice_inverse, lattice_transform
from .coder import BracoCoder
from .config import BracoConfig

logger = logging.getLogger(__name__)

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def load_demo_image(path: str | None, size: int) -> np.ndarray:
    """RGB float image ``[size, size, 3]`` in [0, 1]; scikit-image's astronaut photograph by default."""
    from PIL import Image

    if path is None:
        try:
            from skimage import data
        except ImportError:
            raise UserError("no --image given and scikit-image is not installed; pip install scikit-image or pass --image PATH") from None
        image = Image.fromarray(data.astronaut())
    else:
        image = _open_rgb(path)
    image = image.resize((size, size), Image.BICUBIC)
    return np.asarray(image, dtype=np.float32) / 255.0


def _open_rgb(path: str):
    """Decode ``path`` as RGB by the one rule every LLaVA loader follows (:func:`llava.mm_utils.open_image`: the
    pixel bound before decoding, one sentence for a damaged or non-image file)."""
    from llava.mm_utils import open_image

    return open_image(path)


def patch_tokens(image: np.ndarray, patch: int) -> torch.Tensor:
    """``[H, W, 3]`` → ``[1, (H/p)·(W/p), p·p·3]`` CLIP-normalised patch vectors, row-major."""
    x = (torch.from_numpy(image) - torch.tensor(CLIP_MEAN)) / torch.tensor(CLIP_STD)
    n = image.shape[0] // patch
    x = x[: n * patch, : n * patch].reshape(n, patch, n, patch, 3).permute(0, 2, 1, 3, 4)
    return x.reshape(1, n * n, patch * patch * 3)


def tokens_to_image(tokens: torch.Tensor, n: int, patch: int) -> np.ndarray:
    """Inverse of :func:`patch_tokens` for one image."""
    x = tokens.reshape(n, n, patch, patch, 3).permute(0, 2, 1, 3, 4).reshape(n * patch, n * patch, 3)
    x = x * torch.tensor(CLIP_STD) + torch.tensor(CLIP_MEAN)
    return x.clamp(0, 1).numpy()


def lowpass_tokens(tokens: torch.Tensor, n: int, cutoff: int) -> torch.Tensor:
    """Tokens ``[L, d]`` reconstructed from the ``C x C`` DCT block alone (what the backbone keeps)."""
    d = dct_matrix(n)
    grid = tokens.double().reshape(n, n, -1).permute(2, 0, 1)
    y = lattice_transform(grid, d, d)
    y[:, cutoff:, :] = 0
    y[:, :, cutoff:] = 0
    return lattice_inverse(y, d, d).permute(1, 2, 0).reshape(n * n, -1).float()


def energy_shares(tokens: torch.Tensor, n: int, cutoff: int) -> dict[str, float]:
    """Share of total token energy kept by the ``C x C`` DCT block and by a ``C x C`` spatial block."""
    d = dct_matrix(n)
    grid = tokens.double().reshape(n, n, -1).permute(2, 0, 1)
    total = float(grid.pow(2).sum())
    dct_kept = float(lattice_transform(grid, d, d)[:, :cutoff, :cutoff].pow(2).sum())
    spatial_kept = float(grid[:, :cutoff, :cutoff].pow(2).sum())
    return {"dct": dct_kept / total, "spatial": spatial_kept / total}


def run(args: argparse.Namespace) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    image = load_demo_image(args.image, args.image_size)  # before anything is written
    out = Path(args.out)
    guard_outputs(inputs={"--image": args.image}, folders={"--out": out})  # the folder is written whole, at the end
    n = args.image_size // args.patch
    tokens = patch_tokens(image, args.patch)
    torch.manual_seed(args.seed)

    rows, panels = [], []
    for budget in args.budgets:
        cfg = BracoConfig.from_budget(budget, prior_weight_init=1.0)
        if cfg.cutoff > n or cfg.output_tokens > n * n:
            raise UserError(
                f"budget {budget} ({cfg.name}) does not fit the {n}x{n} grid of {n * n} tokens; "
                f"accepted budgets: 1 to {n * n}"
            )
        coder = BracoCoder.from_config(tokens.shape[-1], cfg).eval()
        with torch.inference_mode():
            z = coder(tokens)
            grid_tokens, grid = coder.split_tokens(tokens)
            weights = coder.residual_weights(grid_tokens, grid)[0] if cfg.residual_tokens else None
        shares = energy_shares(tokens[0], n, cfg.cutoff)
        support = [int((w > 0).sum()) for w in weights] if weights is not None else []
        rows.append({"budget": budget, "name": cfg.name, "coordinates": cfg.resolved_coordinates,
                     "input_tokens": int(tokens.shape[1]), "output_shape": list(z.shape),
                     "dct_energy": shares["dct"], "spatial_energy": shares["spatial"], "residual_support": support})
        panels.append((cfg, tokens_to_image(lowpass_tokens(tokens[0], n, cfg.cutoff), n, args.patch), weights))

    fig, axes = plt.subplots(2, len(panels) + 1, figsize=(3 * (len(panels) + 1), 6.4))
    axes[0, 0].imshow(image)
    axes[0, 0].set_title(f"input: {n}x{n} = {n * n} tokens")
    axes[1, 0].axis("off")
    for col, (cfg, low, weights) in enumerate(panels, start=1):
        axes[0, col].imshow(low)
        axes[0, col].set_title(f"K={cfg.output_tokens} ({cfg.name}): C×C low-pass")
        axes[1, col].imshow(image, alpha=0.55)
        if weights is not None:
            heat = weights.max(0).values.reshape(n, n).numpy()
            axes[1, col].imshow(heat, cmap="inferno", alpha=0.6, extent=(0, args.image_size, args.image_size, 0))
        axes[1, col].set_title(f"{cfg.residual_tokens} residual maps (max)")
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    summary = {"image": args.image or "skimage.data.astronaut", "grid": [n, n], "rows": rows}
    with atomic_folder(out, command="braco demo") as staging:
        fig.savefig(staging / "demo.png", dpi=100)
        write_json(staging / "demo.json", summary)
    plt.close(fig)
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--image", default=None, help="image file (default: scikit-image's astronaut photograph)")
    parser.add_argument("--out", default="outputs/demo", help="output folder for demo.png and demo.json")
    parser.add_argument("--budgets", type=positive_int, nargs="+", default=[4, 9, 16, 25])
    parser.add_argument("--image-size", "--image_size", type=positive_int, default=336)
    parser.add_argument("--patch", type=positive_int, default=14, help="patch size in pixels (at most --image-size)")
    parser.add_argument("--seed", type=int, default=0)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="braco demo", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.patch > args.image_size:
        parser.error(f"--patch {args.patch} is larger than --image-size {args.image_size}; accepted: 1 to {args.image_size}")
    try:
        summary = run(args)
    except UserError as error:  # an unreadable --image, a budget the grid cannot give, an --out that cannot be written
        parser.error(str(error))
    n = summary["grid"][0]
    print(f"{'K':>4} {'alloc':<10} {'coords':<7} {'tokens':>13} {'DCT energy':>11} {'spatial energy':>15}  residual support")
    for r in summary["rows"]:
        print(f"{r['budget']:>4} {r['name']:<10} {r['coordinates']:<7} {r['input_tokens']:>5} -> {r['output_shape'][1]:<5} "
              f"{r['dct_energy']:>10.1%} {r['spatial_energy']:>15.1%}  {r['residual_support']}")
    print(f"grid {n}x{n}; figure and numbers in {Path(args.out) / 'demo.png'} and {Path(args.out) / 'demo.json'}")


if __name__ == "__main__":
    main()
