"""Upstream LLaVA's public names of ``llava/train/train.py``: importable from ``llava.train.train`` with upstream's
signatures, doing upstream's work; and the training entry points run as files, as upstream's scripts run them."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import llava.conversation as conversation
import llava.train.train as upstream
from llava.train.preprocess import preprocess as preprocess_turns

REPO = Path(__file__).resolve().parents[3]

#: upstream's signatures (haotian-liu/LLaVA llava/train/train.py), written out: name -> parameter names.
SIGNATURES = {
    "maybe_zero_3": ["param", "ignore_status", "name"],
    "get_peft_state_maybe_zero_3": ["named_params", "bias"],
    "get_peft_state_non_lora_maybe_zero_3": ["named_params", "require_grad_only"],
    "get_mm_adapter_state_maybe_zero_3": ["named_params", "keys_to_match"],
    "find_all_linear_names": ["model"],
    "safe_save_model_for_hf_trainer": ["trainer", "output_dir"],
    "smart_tokenizer_and_embedding_resize": ["special_tokens_dict", "tokenizer", "model"],
    "preprocess_multimodal": ["sources", "data_args"],
    "preprocess": ["sources", "tokenizer", "has_image"],
    "make_supervised_data_module": ["tokenizer", "data_args"],
    "train": ["attn_implementation"],
    "rank0_print": ["args"],
    # the names research forks import
    "preprocess_v1": ["sources", "tokenizer", "has_image"],
    "preprocess_llama_2": ["sources", "tokenizer", "has_image"],
    "preprocess_mpt": ["sources", "tokenizer", "has_image"],
    "preprocess_plain": ["sources", "tokenizer"],
    "_tokenize_fn": ["strings", "tokenizer"],
    "_mask_targets": ["target", "tokenized_lens", "speakers"],
    "_add_speaker_and_signal": ["header", "source", "get_conversation"],
    "LazySupervisedDataset": ["data_path", "tokenizer", "data_args"],
    "DataCollatorForSupervisedDataset": ["tokenizer"],
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_upstream_names_and_signatures(name: str) -> None:
    function = getattr(upstream, name)
    parameters = [p.name for p in inspect.signature(function).parameters.values() if p.kind != p.KEYWORD_ONLY]
    assert parameters[: len(SIGNATURES[name])] == SIGNATURES[name]
    for class_name in ("ModelArguments", "DataArguments", "TrainingArguments", "LazySupervisedDataset", "DataCollatorForSupervisedDataset"):
        assert inspect.isclass(getattr(upstream, class_name))


def _named() -> list[tuple[str, torch.Tensor]]:
    def param(value: float, grad: bool = True) -> torch.nn.Parameter:
        return torch.nn.Parameter(torch.full((2,), float(value)), requires_grad=grad)

    return [("model.layers.0.q_proj.lora_A.weight", param(1)), ("model.layers.0.q_proj.bias", param(2)),
            ("model.layers.0.k_proj.bias", param(3)), ("model.mm_projector.0.weight", param(4)),
            ("model.embed_tokens.weight", param(5, grad=False))]


def test_state_helpers_select_as_upstream() -> None:
    named = _named()
    assert set(upstream.get_mm_adapter_state_maybe_zero_3(named, ["mm_projector"])) == {"model.mm_projector.0.weight"}
    assert set(upstream.get_peft_state_maybe_zero_3(named, "none")) == {"model.layers.0.q_proj.lora_A.weight"}
    assert set(upstream.get_peft_state_maybe_zero_3(named, "all")) == {
        "model.layers.0.q_proj.lora_A.weight", "model.layers.0.q_proj.bias", "model.layers.0.k_proj.bias"}
    # lora_only: the bias of the LoRA-wrapped q_proj, not k_proj's
    assert set(upstream.get_peft_state_maybe_zero_3(named, "lora_only")) == {"model.layers.0.q_proj.lora_A.weight", "model.layers.0.q_proj.bias"}
    assert set(upstream.get_peft_state_non_lora_maybe_zero_3(named)) == {
        "model.layers.0.q_proj.bias", "model.layers.0.k_proj.bias", "model.mm_projector.0.weight"}
    assert len(upstream.get_peft_state_non_lora_maybe_zero_3(named, require_grad_only=False)) == 4
    copy = upstream.maybe_zero_3(named[3][1])
    assert torch.equal(copy, torch.full((2,), 4.0)) and not copy.requires_grad and copy.data_ptr() != named[3][1].data_ptr()


SOURCE = [{"from": "human", "value": "What is it?\n<image>"}, {"from": "gpt", "value": "A cat."}]


def test_preprocess_uses_the_default_conversation(monkeypatch, tiny_tokenizer_dir) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir), use_fast=False)
    monkeypatch.setattr(conversation, "default_conversation", conversation.conv_templates["v1"])
    multimodal = upstream.preprocess_multimodal([SOURCE], SimpleNamespace(is_multimodal=True, mm_use_im_start_end=False))
    assert multimodal == [[{"from": "human", "value": "<image>\nWhat is it?"}, {"from": "gpt", "value": "A cat."}]]
    result = upstream.preprocess(multimodal, tokenizer, has_image=True)
    expected = preprocess_turns([("human", "<image>\nWhat is it?"), ("gpt", "A cat.")], tokenizer, conversation.conv_templates["v1"])
    assert torch.equal(result["input_ids"][0], expected["input_ids"]) and torch.equal(result["labels"][0], expected["labels"])
    assert upstream.preprocess_multimodal([SOURCE], SimpleNamespace(is_multimodal=False)) == [SOURCE]


def test_make_supervised_data_module(monkeypatch, tmp_path, tiny_tokenizer_dir) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir), use_fast=False, model_max_length=64)
    tokenizer.pad_token = tokenizer.unk_token
    monkeypatch.setattr(conversation, "default_conversation", conversation.conv_templates["v1"])
    data = tmp_path / "text.json"
    data.write_text(json.dumps([{"id": str(i), "conversations": [{"from": "human", "value": f"Say {i}."}, {"from": "gpt", "value": f"{i}"}]}
                                for i in range(3)]))
    module = upstream.make_supervised_data_module(
        tokenizer=tokenizer, data_args=SimpleNamespace(data_path=str(data), image_folder=None, image_aspect_ratio="square"))
    assert set(module) == {"train_dataset", "eval_dataset", "data_collator"} and module["eval_dataset"] is None
    batch = module["data_collator"]([module["train_dataset"][i] for i in range(3)])
    assert batch["input_ids"].shape[0] == 3 and "images" not in batch


def test_safe_save_model_for_a_plain_trainer(tmp_path, tiny_llava_checkpoint) -> None:
    from transformers import Trainer, TrainingArguments

    from llava.model.builder import load_pretrained_model

    _, model, _, _ = load_pretrained_model(str(tiny_llava_checkpoint("mlp2x_gelu")), None, "llava-tiny", device="cpu")
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    args.tune_mm_mlp_adapter = True  # upstream's train() sets this on the training arguments
    trainer = Trainer(model=model, args=args)
    upstream.safe_save_model_for_hf_trainer(trainer, str(tmp_path / "run"))
    saved = torch.load(tmp_path / "run" / "mm_projector.bin", weights_only=True)
    projector = {k: v for k, v in model.state_dict().items() if "mm_projector" in k}
    assert set(saved) == set(projector) and all(torch.equal(saved[k], projector[k]) for k in saved)
    assert (tmp_path / "run" / "config.json").is_file()
    # a checkpoint folder: upstream's <parent>/mm_projector/checkpoint-N.bin
    upstream.safe_save_model_for_hf_trainer(trainer, str(tmp_path / "run" / "checkpoint-7"))
    assert set(torch.load(tmp_path / "run" / "mm_projector" / "checkpoint-7.bin", weights_only=True)) == set(projector)


@pytest.mark.parametrize("entry", ["train.py", "train_mem.py"])
def test_entry_points_run_as_files(entry: str, tmp_path: Path) -> None:
    # upstream launches them as files (deepspeed llava/train/train_mem.py ...); before, train.py's relative imports failed
    result = subprocess.run([sys.executable, str(REPO / "llava" / "train" / entry), "--help"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--mm_tunable_parts" in result.stdout and "--model_name_or_path" in result.stdout


# ---------------------------------------------------------------------------------------------- what forks import


def _tokenizer(tiny_tokenizer_dir, **kwargs):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir), use_fast=False, **kwargs)
    tokenizer.pad_token = tokenizer.unk_token
    return tokenizer


def test_fork_module_globals() -> None:
    assert upstream.conversation_lib is conversation and upstream.local_rank is None


def test_dataset_and_collator_with_upstreams_constructors(monkeypatch, tmp_path, tiny_tokenizer_dir) -> None:
    tokenizer = _tokenizer(tiny_tokenizer_dir, model_max_length=80)
    monkeypatch.setattr(conversation, "default_conversation", conversation.conv_templates["v1"])
    data = tmp_path / "text.json"
    data.write_text(json.dumps([{"id": str(i), "conversations": [{"from": "human", "value": f"Say {i}."}, {"from": "gpt", "value": f"{i}"}]}
                                for i in range(3)]))
    data_args = SimpleNamespace(data_path="unused.json", image_folder=None, image_aspect_ratio="square", is_multimodal=False)
    dataset = upstream.LazySupervisedDataset(data_path=str(data), tokenizer=tokenizer, data_args=data_args)
    expected = preprocess_turns([("human", "Say 1."), ("gpt", "1")], tokenizer, conversation.conv_templates["v1"])
    assert len(dataset) == 3 and dataset.data_args is data_args
    assert torch.equal(dataset[1]["input_ids"], expected["input_ids"]) and torch.equal(dataset[1]["labels"], expected["labels"])
    batch = upstream.DataCollatorForSupervisedDataset(tokenizer=tokenizer)([dataset[0], dataset[1]])
    assert len(expected["input_ids"]) > 80 and batch["input_ids"].shape == (2, 80)  # truncated to model_max_length


def test_per_style_preprocess_follow_the_default_conversation(monkeypatch, tiny_tokenizer_dir) -> None:
    from llava.constants import IGNORE_INDEX, IMAGE_TOKEN_INDEX
    from llava.mm_utils import tokenizer_image_token

    tokenizer = _tokenizer(tiny_tokenizer_dir)
    source = [{"from": "human", "value": "<image>\nWhat is it?"}, {"from": "gpt", "value": "A cat."}]
    for key, function in (("v1", upstream.preprocess_v1), ("llava_llama_2", upstream.preprocess_llama_2)):
        monkeypatch.setattr(conversation, "default_conversation", conversation.conv_templates[key])
        expected = preprocess_turns([("human", "<image>\nWhat is it?"), ("gpt", "A cat.")], tokenizer, conversation.conv_templates[key])
        result = function([source], tokenizer, has_image=True)
        assert torch.equal(result["input_ids"][0], expected["input_ids"]) and torch.equal(result["labels"][0], expected["labels"])
    with pytest.raises(ValueError, match="preprocess_mpt renders MPT templates, but llava.conversation.default_conversation is a "
                                         "LLAMA_2 one .*; set it to the template of your --version"):
        upstream.preprocess_mpt([source], tokenizer)
    # plain: "<image>" + caption + the default conversation's sep; BOS and the image ignored (written out by hand)
    monkeypatch.setattr(conversation, "default_conversation", conversation.conv_templates["plain"])
    result = upstream.preprocess_plain([source], tokenizer)
    ids = tokenizer_image_token("<image>A cat.\n", tokenizer)
    assert ids[1] == IMAGE_TOKEN_INDEX and result["input_ids"][0].tolist() == ids
    assert result["labels"][0].tolist() == [IGNORE_INDEX, IGNORE_INDEX] + ids[2:]


def test_low_level_helpers(monkeypatch, tiny_tokenizer_dir) -> None:
    from llava.constants import IGNORE_INDEX

    tokenizer = _tokenizer(tiny_tokenizer_dir)
    tokenized = upstream._tokenize_fn(["Hello there", "A"], tokenizer)
    assert [t.tolist() for t in tokenized["input_ids"]] == [tokenizer("Hello there").input_ids, tokenizer("A").input_ids]
    assert tokenized["labels"] is tokenized["input_ids"]
    assert tokenized["input_ids_lens"] == tokenized["labels_lens"] == [len(tokenizer("Hello there").input_ids), len(tokenizer("A").input_ids)]
    target = torch.arange(10)
    upstream._mask_targets(target, [3, 4, 3], ["human", "gpt"])
    assert target.tolist() == [IGNORE_INDEX] * 3 + [3, 4] + [IGNORE_INDEX] * 2 + [7, 8, 9]
    monkeypatch.setattr(conversation, "default_conversation", conversation.conv_templates["v1"])
    source = [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}, {"from": "bot", "value": "?"}]
    text = upstream._add_speaker_and_signal("SYS\n\n", source)
    assert text == "SYS\n\n### USER: Hi\n### ASSISTANT: Yo\n### unknown: ?\n### "
    assert source[0]["value"] == "### USER: Hi\n"
