"""Videos as LLaVA-NeXT feeds them (issue 23): frames through the projector, NeXT's 2-D pool and newline positions,
``modalities`` through ``forward`` / ``generate``; expectations computed independently (float64 numpy pooling,
hand-placed newlines, the tower and projector weights applied directly)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import SiglipVisionModel

from llava.constants import IMAGE_TOKEN_INDEX
from llava.model.video import VideoLayout, pool_frames, pooled_grid, video_token_count, video_tokens

from ._support import BRACO, load, prompt_ids

SIDE, PATCH = 54, 6  # 9 x 9 grid, the odd 27 x 27 of SigLIP-384 in small
GRID = (9, 9)


# ------------------------------------------------------------------------------------------ float64 references


def _bilinear(grid: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """``[H, W, D]`` → ``[out_h, out_w, D]``, half-pixel centres, edges clamped (align_corners=False)."""
    height, width = grid.shape[:2]

    def taps(size_in: int, size_out: int) -> list[tuple[int, int, float]]:
        scale = size_in / size_out
        result = []
        for index in range(size_out):
            source = max((index + 0.5) * scale - 0.5, 0.0)
            low = min(int(np.floor(source)), size_in - 1)
            high = min(low + 1, size_in - 1)
            result.append((low, high, source - low))
        return result

    out = np.zeros((out_h, out_w, grid.shape[2]))
    for i, (r0, r1, fr) in enumerate(taps(height, out_h)):
        for j, (c0, c1, fc) in enumerate(taps(width, out_w)):
            top = grid[r0, c0] * (1 - fc) + grid[r0, c1] * fc
            bottom = grid[r1, c0] * (1 - fc) + grid[r1, c1] * fc
            out[i, j] = top * (1 - fr) + bottom * fr
    return out


def _pool(grid: np.ndarray, mode: str) -> np.ndarray:
    """NeXT's stride-2 pool of ``[H, W, D]`` in float64: bilinear to ceil(H/2), or 2x2 mean / max (floor)."""
    if mode == "bilinear":
        return _bilinear(grid, -(-grid.shape[0] // 2), -(-grid.shape[1] // 2))
    rows, cols = grid.shape[0] // 2, grid.shape[1] // 2
    blocks = grid[: rows * 2, : cols * 2].reshape(rows, 2, cols, 2, -1)
    return blocks.mean(axis=(1, 3)) if mode == "average" else blocks.max(axis=(1, 3))


@pytest.mark.parametrize("mode", ["bilinear", "average", "max"])
def test_pool_frames_matches_float64_reference(mode: str) -> None:
    frames = torch.randn(3, 81, 5, dtype=torch.float64)
    pooled = pool_frames(frames, GRID, mode, 2)
    side = 5 if mode == "bilinear" else 4  # ceil(9/2) for bilinear, floor(9/2) for the pools: 27 → 14 / 13
    assert pooled.shape == (3, side * side, 5) and pooled_grid(GRID, mode, 2) == (side, side)
    for frame in range(3):
        expected = _pool(frames[frame].numpy().reshape(9, 9, 5), mode).reshape(-1, 5)
        np.testing.assert_allclose(pooled[frame].numpy(), expected, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------------ newline positions


def _layout(position: str, merge: str = "spatial_unpad", mode: str = "average", grid: tuple[int, int] = (4, 4)) -> VideoLayout:
    return VideoLayout(mode, 2, position, merge, grid, torch.full((1,), -1.0))


def _frames(count: int, tokens: int) -> torch.Tensor:
    """Token t of frame f holds 100·f + t (one channel), so positions can be read off."""
    return (100 * torch.arange(count)[:, None] + torch.arange(tokens)[None]).float()[..., None]


def test_newline_positions_on_pooled_grids() -> None:
    frames = _frames(2, 16)  # 4x4 grids → average-pooled 2x2
    pooled = [[2.5, 4.5, 10.5, 12.5], [102.5, 104.5, 110.5, 112.5]]  # means of the 2x2 blocks, by hand
    nl = -1.0
    cases = {
        "grid": [pooled[0][0], pooled[0][1], nl, pooled[0][2], pooled[0][3], nl,
                 pooled[1][0], pooled[1][1], nl, pooled[1][2], pooled[1][3], nl],
        "frame": [*pooled[0], nl, *pooled[1], nl],
        "one_token": [*pooled[0], *pooled[1], nl],
        "no_token": [*pooled[0], *pooled[1]],
    }
    for position, expected in cases.items():
        layout = _layout(position)
        out = video_tokens(frames, layout)[:, 0].tolist()
        assert out == expected, position
        assert video_token_count(2, 16, layout) == len(expected)


def test_flat_merge_adds_no_newline_and_spatial_one_token_neither() -> None:
    frames = _frames(2, 16)
    for position in ("grid", "frame", "one_token"):
        assert video_tokens(frames, _layout(position, merge="flat")).shape[0] == 8
    assert video_tokens(frames, _layout("one_token", merge="spatial")).shape[0] == 8


def test_compressed_frames_are_not_pooled_and_grid_means_one_newline_per_frame() -> None:
    frames = _frames(3, 5)  # K = 5 tokens per frame: not the 4x4 grid
    out = video_tokens(frames, _layout("grid"))[:, 0].tolist()
    assert out == [0, 1, 2, 3, 4, -1, 100, 101, 102, 103, 104, -1, 200, 201, 202, 203, 204, -1]
    assert video_token_count(3, 5, _layout("grid")) == 18
    assert video_tokens(frames, _layout("no_token")).shape[0] == 15


# ------------------------------------------------------------------------------------------ on a tiny checkpoint


def _video(frames: int = 4) -> np.ndarray:
    """``[F, H, W, 3]`` uint8 frames of a white square moving right on black (decoded-video layout)."""
    video = np.zeros((frames, 40, 60, 3), dtype=np.uint8)
    for index in range(frames):
        video[index, 10:22, 8 * index : 8 * index + 12] = 255
    return video


def _expected_tokens(model, tower_dir: Path, pixels: torch.Tensor, mode: str, position: str) -> torch.Tensor:
    """The video's tokens computed without the model's code: tower hidden_states[-2], mlp2x_gelu by hand, the
    float64 pool, newlines placed by hand."""
    tower = SiglipVisionModel.from_pretrained(tower_dir).eval()
    projector = model.get_model().mm_projector
    newline = model.get_model().image_newline.detach().double().numpy()
    with torch.no_grad():
        hidden = tower(pixels.float(), output_hidden_states=True).hidden_states[-2]
        visual = F.linear(F.gelu(F.linear(hidden, projector[0].weight, projector[0].bias)), projector[2].weight, projector[2].bias)
    pieces = []
    for frame in visual.double().numpy():
        grid = _pool(frame.reshape(9, 9, -1), mode)
        if position == "grid":
            grid = np.concatenate([grid, np.broadcast_to(newline, (grid.shape[0], 1, newline.shape[0]))], axis=1)
        pieces.append(grid.reshape(-1, grid.shape[-1]))
        if position == "frame":
            pieces.append(newline[None])
    if position == "one_token":
        pieces.append(newline[None])
    return torch.from_numpy(np.concatenate(pieces))


def test_video_embeddings_match_an_independent_computation(ov_checkpoint) -> None:
    """Every pool mode × newline position (the config keys are read at call time, as lmms-eval sets them)."""
    path, tower_dir = ov_checkpoint
    tokenizer, model, processor, _ = load(path)
    frames = processor.preprocess(_video(), return_tensors="pt")["pixel_values"]
    ids = prompt_ids(tokenizer, "Where does the square move?", conv_mode="qwen_1_5")[None]
    marker = int((ids[0] == IMAGE_TOKEN_INDEX).nonzero())
    for mode in ("bilinear", "average", "max"):
        for position in ("grid", "frame", "one_token", "no_token"):
            model.config.mm_spatial_pool_mode, model.config.mm_newline_position = mode, position
            with torch.no_grad():
                *_, embeds, _ = model.prepare_inputs_labels_for_multimodal(ids, None, None, None, None, [frames], modalities=["video"])
            expected = _expected_tokens(model, tower_dir, frames, mode, position)
            assert embeds.shape[1] == ids.shape[1] - 1 + expected.shape[0], (mode, position)
            torch.testing.assert_close(embeds[0, marker : marker + expected.shape[0]].double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(embeds[0, :marker], model.get_model().embed_tokens(ids[0, :marker]))


def test_generate_and_forward_take_modalities(ov_checkpoint) -> None:
    """NeXT's ``generate(..., modalities=["video"])`` / ``["image"]``: before issue 23 both were rejected as unused
    model_kwargs."""
    path, _ = ov_checkpoint
    tokenizer, model, processor, _ = load(path)
    frames = processor.preprocess(_video(), return_tensors="pt")["pixel_values"]
    ids = prompt_ids(tokenizer, "Where does the square move?", conv_mode="qwen_1_5")[None]
    out = model.generate(ids, images=[frames], modalities=["video"], do_sample=False, max_new_tokens=3, min_new_tokens=3)
    assert out.shape == (1, 3)
    image = processor.preprocess(_video(1), return_tensors="pt")["pixel_values"]
    out = model.generate(ids, images=image, image_sizes=[(60, 40)], modalities=["image"], do_sample=False, max_new_tokens=2, min_new_tokens=2)
    assert out.shape == (1, 2)
    logits = model(ids, images=[frames], modalities=["video"]).logits
    # 4 frames × (5 × 5 pooled + 5 row newlines) under the checkpoint's grid position.
    assert logits.shape[1] == ids.shape[1] - 1 + 4 * (25 + 5)


def test_next_positional_order_and_bad_modalities(ov_checkpoint) -> None:
    path, _ = ov_checkpoint
    tokenizer, model, processor, _ = load(path)
    frames = processor.preprocess(_video(), return_tensors="pt")["pixel_values"]
    ids = prompt_ids(tokenizer, "What happens?", conv_mode="qwen_1_5")[None]
    with torch.no_grad():
        ours = model.prepare_inputs_labels_for_multimodal(ids, None, None, None, None, [frames], None, modalities=["video"])[4]
        next_order = model.prepare_inputs_labels_for_multimodal(ids, None, None, None, None, [frames], ["video"], None)[4]
    torch.testing.assert_close(ours, next_order)
    with pytest.raises(ValueError, match="unknown modality 'audio'"):
        model.prepare_inputs_labels_for_multimodal(ids, None, None, None, None, [frames], modalities=["audio"])


def test_image_and_video_in_one_prompt(ov_checkpoint) -> None:
    """A multi-image-style prompt with an image and a video: the image merges as without videos (one view +
    newline under spatial_unpad), the video as in the tests above."""
    path, _ = ov_checkpoint
    tokenizer, model, processor, _ = load(path)
    frames = processor.preprocess(_video(2), return_tensors="pt")["pixel_values"]
    image = frames[:1]
    ids = prompt_ids(tokenizer, "Compare them.", num_images=2, conv_mode="qwen_1_5")[None]
    with torch.no_grad():
        embeds = model.prepare_inputs_labels_for_multimodal(
            ids, None, None, None, None, [image, frames], [(60, 40), (60, 40)], modalities=["image", "video"]
        )[4]
    assert embeds.shape[1] == ids.shape[1] - 2 + (81 + 1) + 2 * (25 + 5)


@BRACO
def test_a_compressor_gives_its_budget_per_frame(tmp_path_factory, tiny_qwen_tokenizer_dir) -> None:
    """Braco on video: K = 9 tokens per frame through the same encode_images path, no pool, one newline per frame
    for the grid position."""
    from llava.testing.tiny import build_tiny_llava_checkpoint, build_tiny_siglip_tower

    root = tmp_path_factory.mktemp("ov_braco")
    tower = build_tiny_siglip_tower(root / "siglip", image_size=SIDE, patch_size=PATCH)
    path = build_tiny_llava_checkpoint(
        root / "llava-qwen2-tiny-braco", tower, tiny_qwen_tokenizer_dir, llm="qwen2", projector_type="braco_c2s5",
        extra_config={"mm_patch_merge_type": "spatial_unpad"},
    )
    tokenizer, model, processor, _ = load(path)
    frames = processor.preprocess(_video(3), return_tensors="pt")["pixel_values"]
    ids = prompt_ids(tokenizer, "What happens?", conv_mode="qwen_1_5")[None]
    with torch.no_grad():
        embeds = model.prepare_inputs_labels_for_multimodal(ids, None, None, None, None, [frames], modalities=["video"])[4]
        per_frame = model.encode_images(frames)
    assert per_frame.shape[1] == 9
    assert embeds.shape[1] == ids.shape[1] - 1 + 3 * (9 + 1)
    marker = int((ids[0] == IMAGE_TOKEN_INDEX).nonzero())
    torch.testing.assert_close(embeds[0, marker : marker + 9], per_frame[0])
    torch.testing.assert_close(embeds[0, marker + 9], model.get_model().image_newline)


def test_modalities_as_lmms_eval_passes_them() -> None:
    """lmms-eval's llava_vid passes ``modalities="video"`` (a string), llava_onevision ``["video"]``."""
    from llava.model.video import check_modalities, video_positions

    assert check_modalities("video") == ["video"] and check_modalities(None) == []
    assert video_positions(check_modalities(["image", "video", "text"]), 2) == [1]
    assert video_positions(["video"], 3) == [0]  # NeXT's modalities index the images items
