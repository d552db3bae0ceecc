"""The six baselines as ``--mm_projector_type`` values, end to end through LLaVA.

Each trained baseline runs both stages through ``llava/train/train.py`` with upstream's flags (2 optimizer steps
each, on the session's tiny CLIP tower with a 6x6 grid and tiny LLaMA), saves, reloads through
``load_pretrained_model`` with no extra flags, answers through ``model_vqa_loader`` at batch 1 and 4 with equal
answers, and serves its panel through the worker engine. The tower paths (attention and keys of a layer,
multi-level layers) are checked against an independent eager HF forward on CLIP (CLS) and SigLIP (no CLS).
"""

from __future__ import annotations

import base64
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from braco_patch.baselines import PruMerge
from braco_patch.view import lowpass_view
from llava.constants import IMAGE_TOKEN_INDEX
from llava.eval import core, model_vqa_loader
from llava.mm_utils import process_images
from llava.model.builder import load_pretrained_model
from llava.model.multimodal_projector.plugins import RunInfo, apply_runtime_settings, plugin_for
from llava.serve.engine import ModelEngine
from llava.serve.panels import compute_view
from tests.llava.train.conftest import stage1_flags, stage2_flags, train_data  # noqa: F401 (train_data: fixture)

#: Trained projector types (budgets that fit the 6x6 test grid) and their extra training flags.
TRAINED = {
    "prumerge_k4": [],
    "divprune_k9": [],
    "mqt_k4": ["--mm_mqt_num_queries", "16"],
    "quecc_k4": ["--mm_quecc_heads", "2"],
    "tokenpacker_k9": [],
    "fouriervlm_k9": [],
}
BUDGET = {"prumerge_k4": 4, "divprune_k9": 9, "mqt_k4": 4, "quecc_k4": 4, "tokenpacker_k9": 9, "fouriervlm_k9": 9}
STEPS = ["--max_steps", "2"]
MAX_NEW = "5"


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def baseline_runs(tmp_path_factory, tiny_base_llm, tiny_tower_dir, train_data):  # noqa: F811
    """``run(name) -> (stage-1 dir, stage-2 dir)``, each name trained once per session."""
    from llava.train.train import train

    done: dict[str, tuple[Path, Path]] = {}

    def run(name: str) -> tuple[Path, Path]:
        if name not in done:
            root = tmp_path_factory.mktemp("baselines")
            first, second = root / f"llava-tiny-{name}-pretrain", root / f"llava-tiny-{name}"
            train(argv=stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, name, first) + STEPS + TRAINED[name])
            adapter = first / "mm_projector.bin"
            train(argv=stage2_flags(tiny_base_llm, tiny_tower_dir, train_data, name, second, adapter) + STEPS + TRAINED[name])
            done[name] = (first, second)
        return done[name]

    return run


@pytest.fixture(scope="session")
def loaded_baselines(baseline_runs):
    """``load(name) -> (tokenizer, model, processor, context)`` of the stage-2 checkpoint, with no extra flags."""
    done: dict[str, tuple] = {}

    def load(name: str) -> tuple:
        if name not in done:
            _, second = baseline_runs(name)
            done[name] = load_pretrained_model(str(second), None, second.name, device="cpu")
            done[name][1].eval()
        return done[name]

    return load


@pytest.fixture(scope="session")
def questions(tmp_path_factory, train_data) -> Path:  # noqa: F811
    """Four questions on four differently sized images (so the batch needs padding)."""
    path = tmp_path_factory.mktemp("questions") / "questions.jsonl"
    texts = ["What is shown?", "Describe the colours in the picture.", "How many circles?", "Is there a square?"]
    path.write_text("".join(json.dumps({"question_id": i, "image": f"img{i}.png", "text": t}) + "\n" for i, t in enumerate(texts)))
    return path


def _pixels(model, processor, image: Image.Image) -> torch.Tensor:
    return process_images([image], processor, model.config).to(model.dtype)


def _visual_tokens(model, tokenizer, pixels: torch.Tensor, question: str) -> torch.Tensor:
    """The projector's output while the model prepares a prompt with ``question`` (the generation path: the
    question's ids as a caller passes them, ``tokenizer(question)``)."""
    seen: list = []
    handle = model.get_model().mm_projector.register_forward_hook(lambda module, args, out: seen.append(out))
    text = tokenizer(f"USER: {question} ASSISTANT:", add_special_tokens=False).input_ids
    ids = torch.tensor([[1, IMAGE_TOKEN_INDEX, *text]])
    questions = [torch.tensor(tokenizer(question).input_ids)]
    try:
        with torch.no_grad():
            model.prepare_inputs_labels_for_multimodal(
                ids, None, torch.ones_like(ids), None, None, pixels, question_ids=questions
            )
    finally:
        handle.remove()
    out = seen[0]
    return torch.stack(out) if isinstance(out, list) else out


# ---------------------------------------------------------------------------------------------- training, loading


@pytest.mark.parametrize("name", list(TRAINED))
def test_trains_both_stages_saves_and_reloads_without_flags(name, baseline_runs, loaded_baselines):
    first, second = baseline_runs(name)
    stage1 = torch.load(first / "mm_projector.bin", weights_only=True)
    config = json.loads((second / "config.json").read_text())
    assert config["mm_projector_type"] == name
    _, model, _, _ = loaded_baselines(name)
    projector = model.get_model().mm_projector
    saved = {k.removeprefix("model.mm_projector."): v for k, v in load_file(second / "model.safetensors").items() if "mm_projector." in k}
    state = projector.state_dict()
    assert set(saved) == set(state) == {k.removeprefix("model.mm_projector.") for k in stage1}
    for key, value in saved.items():
        assert torch.equal(state[key], value), key
    # Stage 2 trained the projector further (the stage-1 weights were its start).
    assert any(not torch.equal(stage1[f"model.mm_projector.{k}"], v) for k, v in saved.items())


def test_training_writes_each_methods_resolved_keys(baseline_runs):
    keys = {name: json.loads((baseline_runs(name)[1] / "config.json").read_text()) for name in ("mqt_k4", "quecc_k4", "tokenpacker_k9")}
    assert (keys["mqt_k4"]["mm_mqt_num_queries"], keys["mqt_k4"]["mm_mqt_keys"]) == (16, "position")
    # The release: stage 1 trains all queries, stage 2 random nested prefixes (a run default of the plugin; it
    # only matters while training, so train.py does not keep it in config.json).
    mqt = plugin_for("mqt_k4")
    assert [mqt.run_defaults(RunInfo(stage, 2, "mqt_k4")) for stage in ("pretrain", "finetune")] == [
        {"mm_mqt_nested": False}, {"mm_mqt_nested": True}]
    # The 2-layer test tower: the releases' relative depths 12/16/22/23 of 24 give hidden states 1, 1, 2, 2.
    assert keys["quecc_k4"]["mm_quecc_layers"] == keys["tokenpacker_k9"]["mm_tokenpacker_layers"] == "1,1,2,2"


# ---------------------------------------------------------------------------------------------- eval


@pytest.mark.parametrize("name", list(TRAINED))
def test_model_vqa_loader_answers_equal_at_batch_1_and_4(name, baseline_runs, questions, train_data, tmp_path):  # noqa: F811
    _, second = baseline_runs(name)
    texts = {}
    for batch in ("1", "4"):
        out = tmp_path / f"answers-{batch}.jsonl"
        model_vqa_loader.main([
            "--model-path", str(second), "--question-file", str(questions), "--image-folder", str(train_data.images),
            "--answers-file", str(out), "--temperature", "0", "--conv-mode", "vicuna_v1", "--max_new_tokens", MAX_NEW,
            "--device", "cpu", "--batch-size", batch,
        ])
        texts[batch] = [(line["question_id"], line["text"]) for line in map(json.loads, out.read_text().splitlines())]
    assert [qid for qid, _ in texts["1"]] == [0, 1, 2, 3]
    assert texts["1"] == texts["4"]


@pytest.mark.parametrize("name", list(TRAINED))
def test_sends_its_budget_of_visual_tokens(name, loaded_baselines, tiny_image_file):
    tokenizer, model, processor, _ = loaded_baselines(name)
    pixels = _pixels(model, processor, Image.open(tiny_image_file).convert("RGB"))
    tokens = _visual_tokens(model, tokenizer, pixels, "What is it?")
    assert tokens.shape == (1, BUDGET[name], model.config.hidden_size)


@pytest.mark.parametrize("name", list(TRAINED))
def test_only_quecc_changes_its_tokens_when_only_the_question_changes(name, loaded_baselines, tiny_image_file):
    tokenizer, model, processor, _ = loaded_baselines(name)
    pixels = _pixels(model, processor, Image.open(tiny_image_file).convert("RGB"))
    a = _visual_tokens(model, tokenizer, pixels, "What colour is the square?")
    b = _visual_tokens(model, tokenizer, pixels, "How many circles are there?")
    if name.startswith("quecc"):
        assert (a - b).abs().max() > 1e-4
    else:
        assert torch.equal(a, b)


def test_mqt_token_count_changes_at_inference(baseline_runs, loaded_baselines, tiny_image_file):
    tokenizer, model, processor, _ = loaded_baselines("mqt_k4")
    pixels = _pixels(model, processor, Image.open(tiny_image_file).convert("RGB"))
    with torch.no_grad():
        four = model.encode_images(pixels)
        apply_runtime_settings(model, {"mm_mqt_num_tokens": "2"})
        two = model.encode_images(pixels)
        apply_runtime_settings(model, {"mm_mqt_num_tokens": 16})
        sixteen = model.encode_images(pixels)
        apply_runtime_settings(model, {"mm_mqt_num_tokens": 4})
    assert (four.shape[1], two.shape[1], sixteen.shape[1]) == (4, 2, 16)
    torch.testing.assert_close(two, four[:, :2], rtol=0, atol=1e-6)  # nested: a prefix of the larger budget
    torch.testing.assert_close(four, sixteen[:, :4], rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="MQT-LLaVA can return 1 to 16 tokens"):
        apply_runtime_settings(model, {"mm_mqt_num_tokens": 17})
    # The eval flags (--mm_mqt_num_tokens, the original's --num_visual_tokens, or --projector-setting) on a fresh load.
    parser = core.build_parser(model_vqa_loader.SPEC)
    assert "--mm_mqt_num_tokens" in parser.format_help()
    for flags in (["--mm_mqt_num_tokens", "9"], ["--projector-setting", "mm_mqt_num_tokens=9"]):
        settings = core.projector_settings(parser.parse_args(flags))
        assert settings == {"mm_mqt_num_tokens": 9}  # one setting, parsed by its declaration
    generator, _ = core.load_generator(str(baseline_runs("mqt_k4")[1]), None, "vicuna_v1", "cpu", settings)
    with torch.no_grad():
        assert generator.model.encode_images(pixels).shape[1] == 9


def test_prumerge_trains_with_lora_and_reloads(baseline_runs, tmp_path_factory, tiny_base_llm, tiny_tower_dir, train_data):  # noqa: F811
    from llava.train.train import train

    first, _ = baseline_runs("prumerge_k4")
    output = tmp_path_factory.mktemp("lora") / "llava-tiny-prumerge_k4-lora"
    argv = stage2_flags(tiny_base_llm, tiny_tower_dir, train_data, "prumerge_k4", output, first / "mm_projector.bin")
    train(argv=argv + STEPS + ["--lora_enable", "True", "--lora_r", "4", "--lora_alpha", "8"])
    assert {"adapter_config.json", "non_lora_trainables.bin"} <= {p.name for p in output.iterdir()}
    _, model, processor, _ = load_pretrained_model(str(output), str(tiny_base_llm), output.name, device="cpu")
    assert isinstance(model.get_model().mm_projector.compressor, PruMerge)
    with torch.no_grad():
        assert model.encode_images(torch.zeros(1, 3, 48, 48)).shape == (1, 4, model.config.hidden_size)


# ---------------------------------------------------------------------------------------------- training-free


def _retarget(checkpoint: Path, out: Path, projector_type: str) -> Path:
    """docs/BASELINES.md's recipe: a copy of an mlp2x_gelu checkpoint whose config.json names another type."""
    shutil.copytree(checkpoint, out)
    config = json.loads((out / "config.json").read_text())
    config["mm_projector_type"] = projector_type
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.mark.parametrize("name", ["prumerge_k4", "prumerge", "prumerge_plus_k9", "divprune_k9", "fouriervlm_k9"])
def test_training_free_types_load_an_mlp2x_gelu_checkpoint(name, tiny_llava_checkpoint, tmp_path, questions, train_data):  # noqa: F811
    source = tiny_llava_checkpoint("mlp2x_gelu")
    target = _retarget(source, tmp_path / f"llava-tiny-{name}", name)
    _, model, _, _ = load_pretrained_model(str(target), None, target.name, device="cpu")
    mlp = load_file(source / "model.safetensors")
    for index in (0, 2):
        assert torch.equal(model.get_model().mm_projector.get_submodule(str(index)).weight, mlp[f"model.mm_projector.{index}.weight"])
    texts = {}
    for batch in ("1", "4"):
        out = tmp_path / f"a{batch}.jsonl"
        model_vqa_loader.main([
            "--model-path", str(target), "--question-file", str(questions), "--image-folder", str(train_data.images),
            "--answers-file", str(out), "--temperature", "0", "--conv-mode", "vicuna_v1", "--max_new_tokens", MAX_NEW,
            "--device", "cpu", "--batch-size", batch,
        ])
        texts[batch] = [line["text"] for line in map(json.loads, out.read_text().splitlines())]
    assert len(texts["1"]) == 4 and texts["1"] == texts["4"]


def test_training_free_type_loads_an_mlp2x_gelu_stage1_output(tiny_projector_checkpoint, tiny_base_llm, tmp_path):
    source = tiny_projector_checkpoint("mlp2x_gelu")
    target = _retarget(source, tmp_path / "llava-tiny-pretrain-divprune", "divprune_k4")
    _, model, _, _ = load_pretrained_model(str(target), str(tiny_base_llm), target.name, device="cpu")
    weights = torch.load(source / "mm_projector.bin", weights_only=True)
    assert torch.equal(model.get_model().mm_projector[2].weight, weights["model.mm_projector.2.weight"])
    with torch.no_grad():
        assert model.encode_images(torch.zeros(2, 3, 48, 48)).shape == (2, 4, model.config.hidden_size)


def test_fouriervlm_tokens_equal_a_float64_dct_lowpass(tiny_llava_checkpoint, tmp_path, tiny_image_file):
    """encode_images == MLP(IDCT_C(crop_C(DCT_6(features)))) written out with explicit cosine sums in float64."""
    target = _retarget(tiny_llava_checkpoint("mlp2x_gelu"), tmp_path / "llava-tiny-fv", "fouriervlm_k9")
    _, model, processor, _ = load_pretrained_model(str(target), None, target.name, device="cpu", dtype=torch.float64)
    pixels = _pixels(model, processor, Image.open(tiny_image_file).convert("RGB"))
    with torch.no_grad():
        got = model.encode_images(pixels)
        features = model.get_vision_tower()(pixels)[0].double().reshape(6, 6, -1).numpy()

    def dct(n: int, k: int, i: np.ndarray) -> np.ndarray:
        scale = np.sqrt(1.0 / n) if k == 0 else np.sqrt(2.0 / n)
        return scale * np.cos(np.pi * (2 * i + 1) * k / (2 * n))

    grid = np.arange(6)
    coeff = np.zeros((3, 3, features.shape[-1]))
    for u in range(3):
        for v in range(3):
            coeff[u, v] = np.einsum("h,w,hwd->d", dct(6, u, grid), dct(6, v, grid), features)
    small = np.arange(3)
    out = np.zeros((3, 3, features.shape[-1]))
    for u in range(3):
        for v in range(3):
            out += np.einsum("a,b,d->abd", dct(3, u, small), dct(3, v, small), coeff[u, v])
    projector = model.get_model().mm_projector
    with torch.no_grad():
        expected = projector.project(torch.from_numpy(out.reshape(1, 9, -1)))
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------------------------------------- tower paths


@pytest.fixture(scope="module")
def siglip_tower_dir(tmp_path_factory) -> Path:
    from llava.testing.tiny import build_tiny_siglip_tower

    return build_tiny_siglip_tower(tmp_path_factory.mktemp("siglip") / "siglip-tiny")  # 54 px / 6 → 9x9, no CLS


def _eager_tower(tower_dir: Path, kind: str):
    from transformers import CLIPVisionModel, SiglipVisionModel

    cls = CLIPVisionModel if kind == "clip" else SiglipVisionModel
    return cls.from_pretrained(str(tower_dir), attn_implementation="eager").eval()


@pytest.mark.parametrize("kind", ["clip", "siglip"])
@pytest.mark.parametrize("name", ["prumerge_k4", "prumerge_plus_k9", "tokenpacker_k9", "quecc_k9"])
def test_tower_paths_match_an_independent_eager_forward(kind, name, tmp_path, tiny_tower_dir, siglip_tower_dir, tiny_tokenizer_dir, tiny_image_file):
    from llava.testing.tiny import build_tiny_llava_checkpoint

    tower_dir = tiny_tower_dir if kind == "clip" else siglip_tower_dir
    if name == "quecc_k9" and kind == "clip":
        name = "quecc_k4"  # 6x6 grid: 9 regions of 2x2 work too, but keep one budget per grid
    checkpoint = build_tiny_llava_checkpoint(tmp_path / f"llava-{name}-{kind}", tower_dir, tiny_tokenizer_dir, projector_type=name)
    tokenizer, model, processor, _ = load_pretrained_model(str(checkpoint), None, checkpoint.name, device="cpu")
    model.eval()
    pixels = _pixels(model, processor, Image.open(tiny_image_file).convert("RGB"))
    projector = model.get_model().mm_projector
    eager = _eager_tower(tower_dir, kind)
    with torch.no_grad():
        out = eager(pixels, output_hidden_states=True, output_attentions=True)
        cls = 1 if kind == "clip" else 0
        layers = eager.config.num_hidden_layers
        position = (-2) % (layers + 1)  # mm_vision_select_layer -2
        features = out.hidden_states[position][:, cls:]
        if name.startswith("prumerge"):
            # The release's score: the layer AFTER the select layer (it reads the selected features), one
            # full-width product softmax(q K^T / sqrt(D)) in float64; CLS row (CLIP) or column mean (SigLIP).
            layer = getattr(eager, "vision_model", eager).encoder.layers[position]
            normed = layer.layer_norm1(out.hidden_states[position])
            q, keys = layer.self_attn.q_proj(normed), layer.self_attn.k_proj(normed)
            weights = torch.softmax(q.double() @ keys.double().transpose(1, 2) / q.shape[-1] ** 0.5, dim=-1)
            row = weights[:, 0, 1:] if cls else weights.mean(dim=1)
            expected = projector.project(projector.compressor(features, row.float(), keys))
            got = model.encode_images(pixels)
            kept = projector.compressor.select(row.float())[0]
            if name == "prumerge_k4":
                assert sorted(kept.tolist()) == sorted(np.argsort(-row[0].numpy())[:3].tolist())
        else:
            levels = [out.hidden_states[i][:, cls:] for i in (1, 1, 2, 2)]
            if name.startswith("tokenpacker"):
                expected = type(projector).__mro__[1].forward(projector, features, levels)
                got = model.encode_images(pixels)
            else:
                # QueCC's text vector: the LLM's last state over the question alone, tokenized with BOS.
                embeds = model.get_model().embed_tokens(torch.tensor([tokenizer("What?").input_ids]))
                state = model.get_model()(inputs_embeds=embeds).last_hidden_state[:, -1]
                expected = projector.project(projector.compressor(features, levels, state))
                got = _visual_tokens(model, tokenizer, pixels, "What?")
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_regional_budget_that_does_not_fit_the_grid_is_one_sentence(tmp_path, siglip_tower_dir, tiny_tokenizer_dir):
    from llava.testing.tiny import build_tiny_llava_checkpoint

    with pytest.raises(ValueError) as err:
        build_tiny_llava_checkpoint(tmp_path / "llava-tp", siglip_tower_dir, tiny_tokenizer_dir, projector_type="tokenpacker_k4")
    message = str(err.value)
    assert message == ("TokenPacker cannot give 4 tokens on a 9x9 grid: it needs a (side/s)² grid of s x s regions with s "
                       "dividing 9; accepted budgets: [1, 9, 81]")


# ---------------------------------------------------------------------------------------------- demo


def _png(path: Path) -> str:
    buffer = io.BytesIO()
    Image.open(path).convert("RGB").save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


@pytest.mark.parametrize("name", list(TRAINED))
def test_serves_in_the_demo_with_its_panel(name, loaded_baselines, tiny_image_file, tiny_tower_dir):
    tokenizer, model, processor, context = loaded_baselines(name)
    engine = ModelEngine(tokenizer, model, processor, context, name)
    assert engine.has_compressor_view and engine.visual_tokens == BUDGET[name]
    payload = engine.compressor_view({"images": [_png(tiny_image_file)]})
    assert payload["available"] and payload["tokens_sent"] == BUDGET[name] and payload["tokens_uncompressed"] == 36
    assert Image.open(io.BytesIO(base64.b64decode(payload["png"]))).size[0] > 0
    pixels = _pixels(model, processor, Image.open(tiny_image_file).convert("RGB"))
    projector = model.get_model().mm_projector
    view = compute_view(model, processor, Image.open(tiny_image_file).convert("RGB"))
    if name.startswith("prumerge"):
        # Independent: the eager CLIP forward's layer-2 attention, CLS row, heads averaged: the layer after the one that
        # produced the select layer's features (-2 of 2 layers: layer 1's output), which the model reads too
        # (ModelNeeds(attention=1); the release hooks layers[23] of CLIP-L at -2). The panel read layer 1 before.
        with torch.no_grad():
            attention = _eager_tower(tiny_tower_dir, "clip")(pixels, output_attentions=True).attentions[1]
        row = attention[0, :, 0, 1:].mean(0).numpy()
        assert sorted(payload["kept"]) == sorted(np.argsort(-row)[: BUDGET[name] - 1].tolist())
    elif name.startswith("fouriervlm"):
        np.testing.assert_allclose(view.pictures[1].image, lowpass_view(view.pictures[0].image, (6, 6), 3), rtol=0, atol=1e-12)
    elif name.startswith("mqt"):
        maps = view.arrays["attention"]
        assert maps.shape == (4, 6, 6)
        np.testing.assert_allclose(maps.reshape(4, -1).sum(axis=1), np.ones(4), atol=1e-5)
    elif name.startswith("divprune"):
        with torch.no_grad():
            projected = projector[:-1](model.get_vision_tower()(pixels))
        assert payload["kept"] == projector[-1].select(projected)[0].tolist()
    elif name.startswith(("quecc", "tokenpacker")):
        side = 6 // int(BUDGET[name] ** 0.5)
        first = sorted(payload["regions"][0])
        assert first == [r * 6 + c for r in range(side) for c in range(side)]
    chunks = list(engine.generate_stream({"prompt": "USER: <image>\nWhat is it? ASSISTANT:", "images": [_png(tiny_image_file)],
                                          "temperature": 0, "max_new_tokens": 3}))
    assert chunks and all(chunk.error_code == 0 for chunk in chunks)


# ---------------------------------------------------------------------------------------------- refusals


@pytest.fixture(scope="module")
def clip_24_dir(tmp_path_factory) -> Path:
    """A CLIP tower with the paper's 24x24 grid (48 px, patch 2) and 24 layers' worth of nothing else: config only matters."""
    from llava.testing.tiny import build_tiny_clip_tower

    return build_tiny_clip_tower(tmp_path_factory.mktemp("clip24") / "clip", image_size=48, patch_size=2, hidden=8, heads=1)


REFUSALS = {
    "tokenpacker_k25": "TokenPacker cannot give 25 tokens on a 24x24 grid: it needs a (side/s)² grid of s x s regions with s "
                       "dividing 24; accepted budgets: [1, 4, 9, 16, 36, 64, 144, 576]",
    "quecc_k25": "QueCC cannot give 25 tokens on a 24x24 grid: it needs a (side/s)² grid of s x s regions with s dividing 24; "
                 "accepted budgets: [1, 4, 9, 16, 36, 64, 144, 576]",
    "fouriervlm_k10": "mm_projector_type 'fouriervlm_k10': Fourier-VLM keeps a CxC block of frequencies, so K must be a "
                      "perfect square (4, 9, 16, 25, ...), got 10",
    "divprune_k600": "mm_projector_type 'divprune_k600' keeps 600 tokens but the 24x24 grid has 576 patches; accepted budgets: 1..576",
    "prumerge_k1": "mm_projector_type 'prumerge_k1' keeps 1 token(s), but PruMerge with its extra token needs at least 2",
    # K-1 top patches + the extra token: 2..N+1 (prumerge_k1 is refused above, so the range must not say 1..)
    "prumerge_k578": "mm_projector_type 'prumerge_k578' keeps 578 tokens but the 24x24 grid has 576 patches; accepted budgets: 2..577",
    "mqt_k300": "mm_projector_type 'mqt_k300' asks for 300 tokens but has 256 queries; accepted: 1..256 (or raise mm_mqt_num_queries)",
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_impossible_budgets_are_one_sentence_at_build_time(name, clip_24_dir):
    from types import SimpleNamespace

    from llava.model.multimodal_projector.builder import build_vision_projector

    config = SimpleNamespace(mm_projector_type=name, mm_hidden_size=8, hidden_size=16, mm_vision_tower=str(clip_24_dir))
    with pytest.raises(ValueError) as err:
        build_vision_projector(config)
    assert str(err.value) == REFUSALS[name]


@pytest.mark.parametrize("name", ["prumerge_k4", "mqt_k4", "quecc_k4", "tokenpacker_k4", "fouriervlm_k4"])
def test_grid_methods_refuse_cls_patch_features(name, clip_24_dir):
    from types import SimpleNamespace

    from llava.model.multimodal_projector.builder import build_vision_projector

    config = SimpleNamespace(mm_projector_type=name, mm_hidden_size=8, hidden_size=16, mm_vision_tower=str(clip_24_dir),
                             mm_vision_select_feature="cls_patch")
    with pytest.raises(ValueError, match=rf"^mm_projector_type '{name}' compresses the patch grid, so mm_vision_select_feature must be 'patch', got 'cls_patch'$"):
        build_vision_projector(config)
