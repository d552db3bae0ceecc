"""The quickstart's backbones (issue 12, item 6): each row resolves through the tiny builders and the tower and
language-model registries, gives an 8×8 grid, and the reduced-size ``qwen2-siglip`` run writes a ``llava_qwen``
checkpoint on a SigLIP tower with answers in the ``qwen_1_5`` template."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer

from llava.conversation import check_template_fits
from llava.eval.files import read_jsonl
from llava.model.language_model.registry import language_model_for_checkpoint
from llava.model.multimodal_encoder import CLIPVisionTower, SiglipVisionTower
from llava.model.multimodal_encoder.location import resolve_tower_path
from llava.model.multimodal_encoder.registry import resolve_vision_tower
from llava.quickstart.backbones import BACKBONES, DEFAULT_BACKBONE, resolve_backbone
from llava.quickstart.run import QuickstartConfig, answer_flags, build_models, build_parser, finetune_flags, main, run_quickstart
from llava.quickstart.scenes import DatasetFiles, corpus
from llava.testing.tiny import TINY_LLM_CONFIG_KEYS, TINY_TOKENIZER_BUILDERS, TINY_TOWER_BUILDERS

#: What each backbone must turn into, written out by hand: (tower class, LLaVA model_type, template, CLS tokens).
EXPECTED = {
    "llama-clip": (CLIPVisionTower, "llava_llama", "vicuna_v1", 1),
    "qwen2-siglip": (SiglipVisionTower, "llava_qwen", "qwen_1_5", 0),
}
SMALL = QuickstartConfig(tower_hidden=16, llm_hidden=32, llm_layers=1, vocab_size=400)
TINY = QuickstartConfig(backbone="qwen2-siglip", projectors=("mlp2x_gelu", "braco_c2s5"), train_scenes=8, test_questions=5,
                        finetune_epochs=1.0, batch_size=4)


def test_table_lists_both_backbones_default_first() -> None:
    assert list(BACKBONES) == list(EXPECTED) and DEFAULT_BACKBONE == "llama-clip"
    for backbone in BACKBONES.values():
        assert backbone.tower_kind in TINY_TOWER_BUILDERS
        assert backbone.llm in TINY_LLM_CONFIG_KEYS and backbone.llm in TINY_TOKENIZER_BUILDERS
        assert backbone.template == EXPECTED[backbone.name][2]


@pytest.mark.parametrize("name", list(EXPECTED))
def test_backbone_builds_through_the_registries(name: str, tmp_path: Path) -> None:
    tower_class, llava_type, template, cls_tokens = EXPECTED[name]
    models = build_models(tmp_path, replace(SMALL, backbone=name))
    assert models.template == template
    data = DatasetFiles(*(tmp_path / part for part in ("data", "images", "pre.json", "ft.json", "q.jsonl", "gold.jsonl")))
    stage2 = finetune_flags(models, data, "mlp2x_gelu", SMALL, tmp_path / "ft", tmp_path / "mm_projector.bin")
    assert stage2[stage2.index("--version") + 1] == template
    answering = answer_flags(tmp_path / "ft", data, tmp_path / "answers.jsonl", models.template)
    assert answering[answering.index("--conv-mode") + 1] == template
    tower_type = AutoConfig.from_pretrained(models.tower).model_type
    assert resolve_vision_tower(tower_type, source=str(models.tower)) is tower_class
    assert language_model_for_checkpoint(models.llm).model_type == llava_type
    check_template_fits(template, AutoTokenizer.from_pretrained(str(models.llm)))
    # The tower's own forward: an 8×8 patch grid (64 / 8 per side), plus CLIP's CLS token (the vision half of a whole
    # CLIP checkpoint, as the released towers are).
    tower = AutoModel.from_pretrained(str(models.tower)).eval()
    tower = getattr(tower, "vision_model", tower)
    with torch.no_grad():
        hidden = tower(torch.zeros(1, 3, 64, 64), output_hidden_states=True).hidden_states[-2]
    assert hidden.shape[1] == (64 // 8) ** 2 + cls_tokens


def test_unknown_backbone_is_named_in_one_sentence(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(ValueError, match=r"unknown quickstart backbone 'qwen-clip'; expected one of llama-clip, qwen2-siglip$"):
        resolve_backbone("qwen-clip")
    with pytest.raises(ValueError, match="unknown quickstart backbone 'nope'"):
        run_quickstart("unused", QuickstartConfig(backbone="nope"))
    with pytest.raises(SystemExit):
        main(["--backbone", "nope"])
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_command_line_backbone() -> None:
    assert build_parser().parse_args([]).backbone == "llama-clip"
    assert build_parser().parse_args(["--reduced", "--backbone", "qwen2-siglip"]).backbone == "qwen2-siglip"


def test_corpus_leaves_out_chatml_special_tokens() -> None:
    text = " ".join(corpus("qwen_1_5"))
    assert "You are a helpful assistant." in text and "<|im_start|>" not in text and "<|im_end|>" not in text
    assert corpus() == corpus("vicuna_v1")


def test_qwen2_siglip_quickstart_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "quickstart"
    results = run_quickstart(out, TINY)
    saved = json.loads((out / "results.json").read_text())
    assert saved["backbone"]["name"] == "qwen2-siglip" and saved["backbone"]["template"] == "qwen_1_5"
    # mlp2x_gelu keeps every one of the 8×8 SigLIP tokens (no CLS to drop); braco_c2s5 gives 2² + 5.
    assert [r.visual_tokens for r in results] == [64, 4 + 5]
    gold = {g["question_id"]: g["answer"] for g in read_jsonl(out / "data" / "answers_gold.jsonl")}
    for result, entry in zip(results, saved["runs"]):
        checkpoint = Path(result.checkpoint)
        config = json.loads((checkpoint / "config.json").read_text())
        assert config["model_type"] == "llava_qwen" and config["mm_projector_type"] == result.projector
        tower = resolve_tower_path(config["mm_vision_tower"], str(checkpoint))  # named relative to the checkpoint
        assert AutoConfig.from_pretrained(tower).model_type == "siglip_vision_model"
        assert (checkpoint.parent / f"llava-{result.projector}-pretrain" / "mm_projector.bin").is_file()
        answers = read_jsonl(result.answers)
        assert sorted(a["question_id"] for a in answers) == list(range(5))
        hits = sum(a["text"].strip().lower().rstrip(".") == gold[a["question_id"]] for a in answers)
        assert entry["score"]["accuracy"] == pytest.approx(hits / 5)
    printed = capsys.readouterr().out
    assert "backbone qwen2-siglip:" in printed and "template qwen_1_5" in printed
    assert next(line for line in printed.splitlines() if line.startswith("| braco_c2s5 |")).split(" | ")[1] == "9"
