"""``braco cost --frames T``: one video's prefill (issue 23), against counts written out here.

The expectations are built from :func:`llava.cost.flops.linear_flops` (2·T·d_in·d_out) and published widths, not
from the pipeline code: tower x T, MLP on every frame's patch tokens, LLM over the frames' tokens + the prompt.
The Braco coder's own count (:func:`braco_patch.cost.coder_flops.compressor_flops`) is held by test_coder_flops.py
and is taken from there.
"""

from __future__ import annotations

import json

import pytest

from braco_patch.config import BracoConfig
from braco_patch.cost.cli import main
from braco_patch.cost.coder_flops import compressor_flops
from llava.cost.flops import linear_flops as lin
from llava.cost.flops import total

from .conftest import TINY_LLM, TINY_TOWER

PROMPT = 52


def _clip_l_336() -> int:
    """CLIP ViT-L/14-336, all 24 layers, one frame: 577 tokens (576 patches + CLS), width 1024, MLP 4096."""
    tokens, d = 577, 1024
    patch = lin(576, 3 * 14 * 14, d)
    return patch + 24 * (4 * lin(tokens, d, d) + 2 * lin(tokens, d, 4096))


def _vicuna_7b(tokens: int) -> int:
    """Vicuna-7B prefill over ``tokens`` positions: 32 layers of q/k/v/o 4096², SwiGLU 3 x 4096·11008, LM head on
    every position (vocab 32000); attention scores not counted."""
    return 32 * (4 * lin(tokens, 4096, 4096) + 3 * lin(tokens, 4096, 11008)) + lin(tokens, 4096, 32000)


def _mlp2x(tokens: int) -> int:
    return lin(tokens, 1024, 4096) + lin(tokens, 4096, 4096)


def _rows(result: dict) -> dict[str, dict]:
    return {row["label"]: row for row in result["pipeline"]}


def test_eight_frames_follow_the_direct_formula(tmp_path, capsys):
    out = tmp_path / "video.json"
    main(["--frames", "8", "--budgets", "16", "--json", str(out)])
    text = capsys.readouterr().out
    assert "one video of 8 frames" in text and "per video of 8 frames" in text
    saved = json.loads(out.read_text())
    assert saved["frames"] == 8
    rows = _rows(saved)
    vanilla, braco = rows["vanilla"], rows["Braco-16 (c3s7_coef)"]
    # vanilla: NeXT's bilinear pool, stride 2, after the MLP: 24 x 24 -> 12 x 12 = 144 tokens per frame
    assert (vanilla["visual_tokens"], vanilla["llm_tokens"]) == (8 * 144, 8 * 144 + PROMPT)
    assert vanilla["vision"] == 8 * _clip_l_336()
    assert vanilla["projector"] == _mlp2x(8 * 576)
    assert vanilla["llm"] == _vicuna_7b(8 * 144 + PROMPT)
    assert vanilla["total"] == 8 * _clip_l_336() + _mlp2x(8 * 576) + _vicuna_7b(1204)
    # Braco-16: 16 tokens per frame, not pooled; the 8 frames go through the coder in one call
    coder = total(compressor_flops(BracoConfig.from_budget(16), 1024, (24, 24), "official", batch=8))
    assert (braco["visual_tokens"], braco["llm_tokens"]) == (128, 128 + PROMPT)
    assert braco["total"] == 8 * _clip_l_336() + coder + _mlp2x(128) + _vicuna_7b(180)
    assert vanilla["paper_tflops"] is None and braco["paper_tflops"] is None  # Table 1 is per image


def test_one_frame_is_the_image_pipeline_without_anyres_or_unpooled_grid(capsys):
    image = _rows(main(["--budgets", "4", "16"]))
    frame = _rows(main(["--frames", "1", "--budgets", "4", "16"]))
    # an AnyRes preset's frame is one 336 px view: its 4 crops are image-only
    next_frame = _rows(main(["--preset", "llava-next-7b-2880", "--frames", "1", "--budgets", "4", "16"]))
    capsys.readouterr()
    for label in ("Braco-4 (c1s3_coef)", "Braco-16 (c3s7_coef)"):
        keys = ("visual_tokens", "llm_tokens", "vision", "compressor", "projector", "llm", "total", "total_ours")
        assert {k: frame[label][k] for k in keys} == {k: image[label][k] for k in keys}
        assert {k: next_frame[label][k] for k in keys} == {k: image[label][k] for k in keys}
    # the vanilla frame differs from the image by NeXT's pool only (the LLM sees 144 of the 576 tokens)
    assert frame["vanilla"]["vision"] == image["vanilla"]["vision"]
    assert frame["vanilla"]["projector"] == image["vanilla"]["projector"]
    assert (image["vanilla"]["visual_tokens"], frame["vanilla"]["visual_tokens"]) == (576, 144)
    assert frame["vanilla"]["llm"] == _vicuna_7b(144 + PROMPT)


def test_without_frames_the_json_has_no_video(tmp_path, capsys):
    out = tmp_path / "image.json"
    main(["--budgets", "16", "--json", str(out)])
    capsys.readouterr()
    assert "frames" not in json.loads(out.read_text())


def test_table_g_counts_the_frames(capsys):
    result = main(["--preset", "qwen2.5-3b-siglip", "--frames", "32", "--projector", "mlp2x_gelu", "braco_k16"])
    assert "pipeline and LLM tok: per video of 32 frames" in capsys.readouterr().out
    pipes = {row["type"]: row["pipeline"] for row in result["types"]}
    # SigLIP-384: 27 x 27 -> ceil(27 / 2)² = 196 per frame (bilinear); braco_k16: 16 per frame, no pool
    assert pipes["mlp2x_gelu"]["visual_tokens"] == 32 * 196 and pipes["braco_k16"]["visual_tokens"] == 32 * 16
    d, hidden = 1152, 2048
    assert pipes["mlp2x_gelu"]["projector"] == 32 * (lin(729, d, hidden) + lin(729, hidden, hidden))
    # the (a) rows and the (g) rows count the vanilla video alike
    assert _rows(result)["vanilla"]["total"] == pipes["mlp2x_gelu"]["total"]


def _tiny_config(tmp_path, **video_keys) -> str:
    (tmp_path / "tower").mkdir(exist_ok=True)
    (tmp_path / "tower" / "config.json").write_text(json.dumps(TINY_TOWER))
    config = {"model_type": "llava_llama", **TINY_LLM, "mm_vision_tower": "tower", "mm_hidden_size": 32,
              "mm_projector_type": "mlp2x_gelu", "mm_vision_select_layer": -2, **video_keys}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.mark.parametrize(("keys", "vanilla", "braco"), [
    # 4 x 4 tower grid, 3 frames, Braco K = 4 (c1s3)
    ({}, 3 * 4, 3 * 4),  # NeXT's defaults: bilinear stride 2 -> 2 x 2; flat merge, no newline
    ({"mm_spatial_pool_stride": 1}, 3 * 16, 3 * 4),  # no pool
    ({"mm_spatial_pool_mode": "average", "mm_spatial_pool_stride": 3}, 3 * 1, 3 * 4),  # floor(4 / 3) = 1
    # grid: a newline after each of the 2 pooled rows; a compressed frame has no rows, so one per frame
    ({"mm_patch_merge_type": "spatial_unpad", "mm_newline_position": "grid"}, 3 * (4 + 2), 3 * (4 + 1)),
    ({"mm_patch_merge_type": "spatial_unpad", "mm_newline_position": "frame"}, 3 * (4 + 1), 3 * (4 + 1)),
    ({"mm_patch_merge_type": "spatial_unpad", "mm_newline_position": "one_token"}, 3 * 4 + 1, 3 * 4 + 1),
    ({"mm_patch_merge_type": "spatial", "mm_newline_position": "one_token"}, 3 * 4, 3 * 4),  # NeXT: unpad only
])
def test_a_config_lays_out_its_video_as_the_model_does(tmp_path, capsys, keys, vanilla, braco):
    result = main(["--config", _tiny_config(tmp_path, **keys), "--frames", "3", "--budgets", "4", "--prompt-tokens", "5"])
    capsys.readouterr()
    rows = _rows(result)
    assert rows["vanilla"]["visual_tokens"] == vanilla and rows["Braco-4 (c1s3_coef)"]["visual_tokens"] == braco
    assert rows["vanilla"]["llm_tokens"] == vanilla + 5


@pytest.mark.parametrize("value", ["0", "-1", "x", "1.5"])
def test_bad_frame_counts_are_one_sentence(value, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--frames", value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "braco cost: error: argument --frames: expected a positive integer, got" in err and value.lstrip("-") in err


@pytest.mark.parametrize(("argv", "message"), [
    (["--frames", "8", "--measure", "--device", "cpu"], "--frames is analytic only"),
    (["--frames", "8", "--table", "compressors"], "--frames costs the pipeline tables"),
    (["--preset", "llava-next-7b-2880", "--frames", "8", "--input-tokens", "2880"], "expected --input-tokens 576"),
])
def test_what_frames_does_not_cover_is_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("braco cost: error: ") and message in captured.err and captured.out == ""


def test_a_newline_the_model_cannot_have_is_refused(tmp_path, capsys):
    config = _tiny_config(tmp_path, mm_patch_merge_type="spatial", mm_newline_position="grid")
    with pytest.raises(SystemExit) as exc:
        main(["--config", config, "--frames", "2", "--budgets", "4"])
    assert exc.value.code == 2 and "has none" in capsys.readouterr().err
