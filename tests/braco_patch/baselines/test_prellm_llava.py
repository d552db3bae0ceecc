"""VisionZip, VisPruner and CDPruner through LLaVA: on an existing mlp2x_gelu checkpoint (training-free), trained
like the other baselines, in the loaders, the demo panel and the cost tables.

The tower is a whole tiny CLIP checkpoint (text tower, projections and a CLIP tokenizer, as openai/clip-vit-* ship),
6x6 patches, 2 layers; the model path is checked against an independent eager forward of that checkpoint through
transformers (attention probabilities, keys, the CLS token, CLIP's text and image embeddings).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from braco_patch.baselines import CDPruner, VisionZip, VisPruner
from llava.eval import model_vqa_loader
from llava.mm_utils import process_images
from llava.model.builder import load_pretrained_model
from llava.model.compressor_text import instruction_of, question_kwargs
from llava.serve.panels import compute_view
from llava.utils import cli_main
from tests.llava.train.conftest import stage1_flags, stage2_flags, train_data  # noqa: F401 (train_data: fixture)

TYPES = ("visionzip_k9", "vispruner_k9", "cdpruner_k9")
PROMPT = "A chat. USER: <image>\nWhat colour is the square on the left?\nAnswer the question using a single word or phrase. ASSISTANT:"


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory) -> Path:
    from llava.testing.tiny import build_tiny_clip_tower

    return build_tiny_clip_tower(tmp_path_factory.mktemp("clip-full") / "clip", image_size=48, patch_size=8, full_model=True, seed=5)


@pytest.fixture(scope="module")
def mlp_checkpoint(tmp_path_factory, clip_dir, tiny_tokenizer_dir) -> Path:
    from llava.testing.tiny import build_tiny_llava_checkpoint

    return build_tiny_llava_checkpoint(tmp_path_factory.mktemp("prellm") / "llava-tiny-mlp2x", clip_dir, tiny_tokenizer_dir)


@pytest.fixture(scope="module")
def overridden(mlp_checkpoint):
    cache: dict[str, tuple] = {}

    def load(name: str) -> tuple:
        if name not in cache:
            tokenizer, model, processor, _ = load_pretrained_model(
                str(mlp_checkpoint), None, mlp_checkpoint.name, device="cpu", overwrite_config={"mm_projector_type": name}
            )
            cache[name] = (tokenizer, model.eval(), processor)
        return cache[name]

    return load


def _pixels(model, processor, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    images = [Image.fromarray((torch.rand(40, 30 + 10 * i, 3, generator=g) * 255).byte().numpy()) for i in range(2)]
    return process_images(images, processor, model.config).to(model.dtype)


def _eager(clip_dir: Path):
    from transformers import CLIPModel

    return CLIPModel.from_pretrained(str(clip_dir), attn_implementation="eager").eval()


def _clip_text(clip, ids: torch.Tensor) -> torch.Tensor:
    """CLIP's projected text embedding of ``ids`` in zero-padded context-length segments, straight from transformers."""
    context = clip.config.text_config.max_position_embeddings
    segments = -(-ids.numel() // context)
    rows = torch.zeros(segments * context, dtype=torch.long)
    rows[: ids.numel()] = ids
    mask = (torch.arange(segments * context) < ids.numel()).long().view(segments, context)
    return clip.text_projection(clip.text_model(input_ids=rows.view(segments, context), attention_mask=mask).pooler_output)


def _text(model, ids_per_image):
    tower = model.get_vision_tower()
    return [tower.encode_text(ids) for ids in ids_per_image], list(ids_per_image)


# ---------------------------------------------------------------------------------------------- what the tower gives


def test_tower_outputs_the_cls_token_and_the_attention_of_the_select_layer(overridden, clip_dir):
    _, model, processor = overridden("visionzip_k9")
    pixels = _pixels(model, processor)
    with torch.no_grad():
        out = model.get_vision_tower().encode(pixels, attention_layer=-2)
        eager = _eager(clip_dir).vision_model(pixels, output_hidden_states=True, output_attentions=True)
    torch.testing.assert_close(out.cls_token, eager.hidden_states[-2][:, 0])  # hidden_states[-2], CLS included
    torch.testing.assert_close(out.attention, eager.attentions[-2], rtol=1e-5, atol=1e-6)  # the layer that produced them


def test_paired_text_encoder_is_clips_own(overridden, clip_dir):
    tokenizer, model, processor = overridden("cdpruner_k9")
    tower = model.get_vision_tower()
    clip = _eager(clip_dir)
    ids = torch.tensor(tower.text_tokenizer("what colour is the square on the left? it is red.").input_ids)
    context = clip.config.text_config.max_position_embeddings
    assert -(-ids.numel() // context) == 3  # 41 ids (bytes of each word, BOS, EOS) in segments of the tiny text tower's 16
    with torch.no_grad():
        got = tower.encode_text(ids)
        expected = _clip_text(clip, ids)
        features = model.get_vision_tower()(_pixels(model, processor))
        joint = clip.visual_projection(clip.vision_model.post_layernorm(features))
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(tower.image_text_features(features), joint)


def test_the_instruction_drops_llavas_answer_format_lines(overridden):
    assert instruction_of("What is it?\nAnswer the question using a single word or phrase.") == "What is it?"
    assert instruction_of("Which one?\nA. cat\nB. dog\nAnswer with the option's letter from the given choices directly.") == (
        "Which one?\nA. cat\nB. dog")
    assert instruction_of("Is it red? Please answer yes or no.") == "Is it red? Please answer yes or no."
    tokenizer, model, _ = overridden("cdpruner_k9")
    given = question_kwargs(model, tokenizer, [PROMPT], "vicuna_v1")["question_ids"][0]
    clip_tokenizer = model.get_vision_tower().text_tokenizer
    assert given.tolist() == clip_tokenizer("What colour is the square on the left?").input_ids
    assert question_kwargs(overridden("vispruner_k9")[1], tokenizer, [PROMPT], "vicuna_v1") == {}


# ---------------------------------------------------------------------------------------------- training-free


@pytest.mark.parametrize("name", TYPES)
def test_runs_on_an_mlp2x_gelu_checkpoint_with_its_weights(name, overridden, mlp_checkpoint, clip_dir):
    tokenizer, model, processor = overridden(name)
    projector = model.get_model().mm_projector
    weights = load_file(mlp_checkpoint / "model.safetensors")
    for key, value in projector.state_dict().items():
        assert torch.equal(value, weights[f"model.mm_projector.{key}"]), key
    assert json.loads((mlp_checkpoint / "config.json").read_text())["mm_projector_type"] == "mlp2x_gelu"  # the folder is untouched
    pixels = _pixels(model, processor)
    clip = _eager(clip_dir)
    with torch.no_grad():
        eager = clip.vision_model(pixels, output_hidden_states=True, output_attentions=True)
        features = eager.hidden_states[-2][:, 1:]
        layer = clip.vision_model.encoder.layers[-2]  # produced hidden_states[-2]
        keys = layer.self_attn.k_proj(layer.layer_norm1(eager.hidden_states[-3]))
        if name.startswith("visionzip"):
            expected = projector.project(VisionZip(32, 9)(features, eager.attentions[-2], keys, eager.hidden_states[-2][:, 0]))
            got = model.encode_images(pixels)
        elif name.startswith("vispruner"):
            expected = projector.project(VisPruner(32, 9)(features, eager.attentions[-2]))
            got = model.encode_images(pixels)
        else:
            ids = question_kwargs(model, tokenizer, [PROMPT, PROMPT.replace("left", "right")], "vicuna_v1")["question_ids"]
            texts = [_clip_text(clip, row) for row in ids]
            joint = clip.visual_projection(clip.vision_model.post_layernorm(features))
            expected = CDPruner(9)(projector.project(features), joint, texts)
            got = model.encode_images(pixels, _text(model, ids))
    assert got.shape == (2, 9, model.config.hidden_size)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_cdpruner_tokens_follow_the_instruction(overridden):
    tokenizer, model, processor = overridden("cdpruner_k9")
    pixels = _pixels(model, processor)[:1]
    kept = []
    for question in ("What colour is the square on the left?", "How many circles are there in the picture?"):
        ids = question_kwargs(model, tokenizer, [PROMPT.replace("What colour is the square on the left?", question)], "vicuna_v1")
        with torch.no_grad():
            tokens = model.get_model().mm_projector.project(model.get_vision_tower()(pixels))
            text = _text(model, ids["question_ids"])
            paired = model.get_vision_tower().image_text_features(model.get_vision_tower()(pixels))
            kept.append(model.get_model().mm_projector.compressor.select(tokens, paired, text[0]).tolist())
    assert kept[0] != kept[1]
    with torch.no_grad():  # without a question (the demo's token count) the DPP runs on similarity alone
        assert model.encode_images(pixels).shape == (1, 9, model.config.hidden_size)


def test_loader_flag_runs_a_training_free_type_on_the_checkpoint(mlp_checkpoint, tmp_path, tiny_image_file, capsys):
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"question_id": i, "image": tiny_image_file.name, "text": t}) + "\n"
                                 for i, t in enumerate(["What is it?\nAnswer the question using a single word or phrase.", "Colour?"])))
    common = ["--model-path", str(mlp_checkpoint), "--question-file", str(questions), "--image-folder", str(tiny_image_file.parent),
              "--temperature", "0", "--conv-mode", "vicuna_v1", "--max_new_tokens", "3", "--device", "cpu"]
    answers = {}
    for batch in ("1", "2"):
        out = tmp_path / f"a{batch}.jsonl"
        model_vqa_loader.main(common + ["--answers-file", str(out), "--batch-size", batch, "--projector-type", "cdpruner_k4"])
        answers[batch] = [row["text"] for row in map(json.loads, out.read_text().splitlines())]
    assert len(answers["1"]) == 2 and answers["1"] == answers["2"]
    # the type is part of what produced the answers: resuming that file with another type is refused
    assert cli_main(model_vqa_loader.main, common + ["--answers-file", str(tmp_path / "a1.jsonl"), "--projector-type", "vispruner_k4"]) == 2
    assert "projector_type 'cdpruner_k4' -> 'vispruner_k4'" in capsys.readouterr().err
    # a build-time setting of the --projector-type compressor goes with it; without it the key is refused
    out = tmp_path / "r.jsonl"
    model_vqa_loader.main(common + ["--answers-file", str(out), "--projector-type", "vispruner_k4",
                                    "--projector-setting", "mm_vispruner_important_ratio=0.25"])
    assert len(out.read_text().splitlines()) == 2
    for extra, message in (
        (["--projector-setting", "mm_vispruner_important_ratio=0.25"],
         "'mm_vispruner_important_ratio' is not a runtime setting of any installed compressor nor a setting of the --projector-type compressor"),
        (["--projector-type", "visionzip"], "--projector-type 'visionzip' is not a known projector type; known projector types:"),
        (["--projector-type", "vispruner_k4", "--projector-setting", "mm_vispruner_important_ratio=2"],
         "mm_vispruner_important_ratio must be between 0 and 1, got '2'"),
    ):
        assert cli_main(model_vqa_loader.main, common + ["--answers-file", str(tmp_path / "x.jsonl")] + extra) == 2
        assert message in capsys.readouterr().err


def test_a_trained_compressor_cannot_replace_the_mlp_at_load(mlp_checkpoint):
    with pytest.raises(ValueError, match=r"do not match mm_projector_type 'quecc_k4' given at load \(it must keep the checkpoint's projector"):
        load_pretrained_model(str(mlp_checkpoint), None, mlp_checkpoint.name, device="cpu", overwrite_config={"mm_projector_type": "quecc_k4"})


# ---------------------------------------------------------------------------------------------- trained like the others


@pytest.mark.parametrize("name", ["visionzip_k4", "vispruner_k4", "cdpruner_k4"])
def test_trains_and_reloads_without_flags(name, tmp_path, tiny_base_llm, clip_dir, train_data):  # noqa: F811
    from llava.train.train import train

    first = tmp_path / f"llava-tiny-{name}-pretrain"
    train(argv=stage1_flags(tiny_base_llm, clip_dir, train_data, name, first) + ["--max_steps", "2"])
    output = first
    if name.startswith("cdpruner"):  # stage 2: every sample carries its first question in CLIP's tokens
        output = tmp_path / f"llava-tiny-{name}"
        train(argv=stage2_flags(tiny_base_llm, clip_dir, train_data, name, output, first / "mm_projector.bin") + ["--max_steps", "2"])
        _, model, processor, _ = load_pretrained_model(str(output), None, output.name, device="cpu")
    else:
        _, model, processor, _ = load_pretrained_model(str(output), str(tiny_base_llm), output.name, device="cpu")
    config = json.loads((output / "config.json").read_text())
    assert config["mm_projector_type"] == name
    assert config.get("mm_visionzip_contextual") == (1 if name.startswith("visionzip") else None)
    with torch.no_grad():
        assert model.encode_images(_pixels(model, processor)).shape == (2, 4, model.config.hidden_size)


# ---------------------------------------------------------------------------------------------- towers without CLS


def test_siglip_towers(tmp_path, tiny_tokenizer_dir):
    from llava.testing.tiny import build_tiny_llava_checkpoint, build_tiny_siglip_tower

    siglip = build_tiny_siglip_tower(tmp_path / "siglip", full_model=True)  # 9x9, no CLS token, no CLIP text tower
    checkpoint = build_tiny_llava_checkpoint(tmp_path / "llava-siglip", siglip, tiny_tokenizer_dir)
    for name in ("visionzip_k9", "vispruner_k9"):  # ranked by the attention each patch receives
        tokenizer, model, _, _ = load_pretrained_model(str(checkpoint), None, checkpoint.name, device="cpu", overwrite_config={"mm_projector_type": name})
        with torch.no_grad():
            assert model.encode_images(torch.randn(2, 3, 54, 54)).shape == (2, 9, model.config.hidden_size)
    tokenizer, model, _, _ = load_pretrained_model(str(checkpoint), None, checkpoint.name, device="cpu", overwrite_config={"mm_projector_type": "cdpruner_k9"})
    with pytest.raises(ValueError, match="with the vision tower's paired CLIP text encoder, but the siglip tower .* has none here; use a CLIP tower"):
        question_kwargs(model, tokenizer, [PROMPT], "vicuna_v1")


# ---------------------------------------------------------------------------------------------- demo, cost


@pytest.mark.parametrize("name", TYPES)
def test_demo_panel(name, overridden, tiny_image_file):
    tokenizer, model, processor = overridden(name)
    view = compute_view(model, processor, Image.open(tiny_image_file).convert("RGB"))
    assert view.details["tokens_sent"] == 9 and "9 visual tokens sent" in view.summary
    if name.startswith("visionzip"):
        groups = view.details["groups"]
        # K = 9: the CLS token, 7 patches and one contextual token that merges the other 29 patches
        assert len(view.details["kept"]) == 7 and groups.count(-1) == 7 and sorted(set(groups)) == [-1, 0]
    elif name.startswith("vispruner"):
        assert (len(view.details["important"]), len(view.details["diverse"])) == (4, 5)
        assert view.details["kept"] == sorted(view.details["important"] + view.details["diverse"])
    else:
        assert len(view.details["kept"]) == 9


def test_cost_rows_and_budgets():
    from llava.cost.flops import LMDims
    from llava.cost.module import CostSetting, module_cost, types_at_budget

    vicuna = LMDims(hidden=4096, intermediate=11008, layers=32, heads=32, kv_heads=32, head_dim=128, vocab=32000)
    setting = CostSetting(mm_hidden=1024, lm=vicuna, grid=(24, 24))
    offered = types_at_budget(64)
    assert (offered["visionzip"], offered["vispruner"], offered["cdpruner"]) == (["visionzip_k64"], ["vispruner_k64"], ["cdpruner_k64"])
    rows = {name: module_cost(name, setting) for name in ("visionzip_k64", "vispruner_k64", "cdpruner_k64")}
    assert {name: (row.tokens, row.boundary) for name, row in rows.items()} == {
        "visionzip_k64": (64, "pre"), "vispruner_k64": (64, "pre"), "cdpruner_k64": (64, "post")}
    assert rows["visionzip_k64"].projector == rows["vispruner_k64"].projector  # mlp2x_gelu on K tokens
    assert rows["cdpruner_k64"].projector["linear_1"] == 2 * 576 * 1024 * 4096  # mlp2x_gelu on all N, then selection
    # a stored setting changes the count the way it changes the module
    from types import SimpleNamespace

    ratio = module_cost("vispruner_k64", setting, SimpleNamespace(mm_projector_type="vispruner_k64", mm_vispruner_important_ratio=0.75))
    assert ratio.module["matching"] < rows["vispruner_k64"].module["matching"]


def test_compare_counts_a_run_with_its_projector_type(mlp_checkpoint, tmp_path, capsys):
    from llava.cost.pipeline import checkpoint_prefill_flops
    from llava.eval import compare
    from llava.eval.files import write_score

    runs = {}
    for name, score in (("vanilla", 60.0), ("vz", 57.0)):
        runs[name] = tmp_path / name
        runs[name].mkdir()
        write_score(runs[name] / "gqa.json", "gqa", score, "accuracy (%)")
    args = ["--results", f"vanilla={runs['vanilla']}", "--results", f"vz={runs['vz']}", "--vanilla", "vanilla",
            "--checkpoint", f"vanilla={mlp_checkpoint}", "--checkpoint", f"vz={mlp_checkpoint}"]
    result = compare.main(args + ["--projector-type", "vz=visionzip_k9"])
    flops = {run.name: run.flops for run in result.runs}
    assert flops["vz"] == checkpoint_prefill_flops(mlp_checkpoint, 52, overwrite={"mm_projector_type": "visionzip_k9"})["total"]
    assert flops["vz"] < flops["vanilla"] == checkpoint_prefill_flops(mlp_checkpoint, 52)["total"]
    assert {run.name: run.tokens for run in result.runs} == {"vanilla": 36, "vz": 9}
    assert {run.name: run.label for run in result.runs} == {"vanilla": "vanilla (mlp2x_gelu)", "vz": "vz (visionzip_k9)"}  # the evaluated type
    for extra, message in ((["--projector-type", "vz=nosuch_k9"], "--projector-type 'nosuch_k9' is not a known projector type"),
                           (["--projector-type", "vanilla=vispruner_k9", "--projector-type", "vz=visionzip_k9"], None)):
        if message is None:
            assert compare.main(args + extra)
        else:
            assert cli_main(compare.main, args + extra) == 2 and message in capsys.readouterr().err


def test_the_quickstarts_all_lists_them():
    from llava.quickstart.run import expand_projectors

    projectors, notes = expand_projectors(["all"], 16)
    assert {"visionzip_k16", "vispruner_k16", "cdpruner_k16"} <= set(projectors)
    assert not any(note.startswith(("visionzip", "vispruner", "cdpruner")) for note in notes)


REFUSALS = {
    "visionzip_k1": "mm_projector_type 'visionzip_k1' keeps 1 token, but VisionZip needs at least 2 (a dominant and a contextual one)",
    "visionzip_k38": "mm_projector_type 'visionzip_k38' keeps 38 tokens but the 6x6 grid has 36 patches; accepted budgets: 2..37",
    "vispruner_k37": "mm_projector_type 'vispruner_k37' keeps 37 tokens but the 6x6 grid has 36 patches; accepted budgets: 1..36",
    "cdpruner_k37": "mm_projector_type 'cdpruner_k37' keeps 37 tokens but the 6x6 grid has 36 patches; accepted budgets: 1..36",
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_impossible_budgets_are_one_sentence_at_build_time(name, clip_dir):
    from types import SimpleNamespace

    from llava.model.multimodal_projector.builder import build_vision_projector

    config = SimpleNamespace(mm_projector_type=name, mm_hidden_size=32, hidden_size=16, mm_vision_tower=str(clip_dir))
    with pytest.raises(ValueError) as err:
        build_vision_projector(config)
    assert str(err.value) == REFUSALS[name]
    config.mm_projector_type, config.mm_vision_select_feature = "vispruner_k4", "cls_patch"
    with pytest.raises(ValueError, match="compresses the patch grid, so mm_vision_select_feature must be 'patch', got 'cls_patch'"):
        build_vision_projector(config)
