"""The text a compressor reads: ``question_of`` for every template family, and the question travelling as an
argument from ``generate`` / ``forward`` / the training data to the compressor (QueCC's release: the question of
the first user turn, tokenized alone with BOS; never the system text, roles or later turns)."""

from __future__ import annotations

import re

import pytest
import torch

from llava.constants import IMAGE_TOKEN_INDEX
from llava.conversation import conv_templates, question_of
from llava.mm_utils import tokenizer_image_token
from llava.model.builder import load_pretrained_model
from llava.model.compressor_text import question_ids, question_kwargs, text_need

QUESTION = "What colour is the square?\nAnswer the question using a single word or phrase."


def _prompt(template: str, *turns: str | None) -> str:
    conv = conv_templates[template].copy()
    for index, text in enumerate(turns):
        conv.append_message(conv.roles[index % 2], text)
    return conv.get_prompt()


# Hand-written prompts of each family (the template's own rendering is checked against them, so a change to a
# template cannot silently move the question).
FAMILIES = {
    "vicuna_v1": (
        "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
        "detailed, and polite answers to the user's questions. USER: <image>\n" + QUESTION + " ASSISTANT:"
    ),
    "llava_llama_2": (
        "[INST] <<SYS>>\nYou are a helpful language and vision assistant. You are able to understand the visual "
        "content that the user provides, and assist the user with a variety of tasks using natural language.\n"
        "<</SYS>>\n\n<image>\n" + QUESTION + " [/INST]"
    ),
    "mistral_instruct": "[INST] <image>\n" + QUESTION + " [/INST]",
    "qwen_2": (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n<image>\n" + QUESTION
        + "<|im_end|>\n<|im_start|>assistant\n"
    ),
    "chatml_direct": (
        "<|im_start|>system\nAnswer the questions.<|im_end|><|im_start|>user\n<image>\n" + QUESTION
        + "<|im_end|><|im_start|>assistant\n"
    ),
    "plain": "<image>\n" + QUESTION + "\n",
}


@pytest.mark.parametrize("template", list(FAMILIES))
def test_question_of_every_template_family(template):
    prompt = _prompt(template, "<image>\n" + QUESTION, None)
    assert prompt == FAMILIES[template]
    assert question_of(prompt, template) == QUESTION
    assert question_of(prompt, conv_templates[template]) == QUESTION


@pytest.mark.parametrize("template", [key for key in FAMILIES if key != "plain"])
def test_question_of_is_the_first_user_turn_only(template):
    prompt = _prompt(template, "<image>\nHow many circles?", "Three.", "And squares?", None)
    assert question_of(prompt, template) == "How many circles?"


@pytest.mark.parametrize("prompt, template, expected", [
    ("<image>A square next to a circle.\n", "plain", ""),  # stage 1's training text: the caption is the answer
    ("USER: <image>\nWhat is it? ASSISTANT:", "vicuna_v1", "What is it?"),  # written without the system text
    ("<|im_start|>user\n<image>\nWhat?<|im_end|>\n<|im_start|>assistant\n", "qwen_2", "What?"),
    (_prompt("vicuna_v1", "<im_start><image><im_end>\nWhat?", None), "vicuna_v1", "What?"),  # mm_use_im_start_end
    (_prompt("vicuna_v1", "What is shown?\n<image>", None), "vicuna_v1", "What is shown?"),  # image after the text
    (_prompt("v0", "<image>\nWhat?", None), "v0", "What?"),  # after the template's own few-shot exchange
])
def test_question_of_edge_layouts(prompt, template, expected):
    assert question_of(prompt, template) == expected


def test_question_of_refuses_another_format_in_one_sentence():
    with pytest.raises(ValueError, match=re.escape("the prompt does not start the way the 'qwen' template renders")):
        question_of("USER: <image>\nWhat? ASSISTANT:", "qwen_2")
    with pytest.raises(ValueError, match="unknown conversation template 'nope'"):
        question_of("x", "nope")


def test_question_ids_are_the_question_alone_with_the_tokenizers_special_tokens(tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))
    prompt = FAMILIES["vicuna_v1"]
    (ids,) = question_ids([prompt], tokenizer, "vicuna_v1")
    body = tokenizer(QUESTION, add_special_tokens=False).input_ids
    assert ids.tolist() == [tokenizer.bos_token_id, *body]
    assert len(ids) < len(tokenizer_image_token(prompt, tokenizer)) - 10  # not the system text and roles


# ---------------------------------------------------------------------------------------------- the model path


@pytest.fixture(scope="module")
def quecc_model(tiny_llava_checkpoint):
    checkpoint = tiny_llava_checkpoint("quecc_k4", extra_config={"mm_quecc_heads": 2})
    tokenizer, model, processor, _ = load_pretrained_model(str(checkpoint), None, checkpoint.name, device="cpu")
    return tokenizer, model.eval(), processor


def _seen_text(model) -> tuple[list, callable]:
    seen: list = []
    projector = model.get_model().mm_projector
    handle = projector.register_forward_hook(lambda module, args, out: seen.append(args[1]))
    return seen, handle.remove


def test_generate_hands_the_compressor_the_question_alone(quecc_model):
    tokenizer, model, _ = quecc_model
    assert text_need(model) == "question"
    prompt = _prompt("vicuna_v1", "<image>\n" + QUESTION, None)
    ids = tokenizer_image_token(prompt, tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt").unsqueeze(0)
    seen, remove = _seen_text(model)
    attributes = set(vars(model))
    try:
        model.generate(ids, images=torch.zeros(1, 3, 48, 48), max_new_tokens=1, do_sample=False,
                       **question_kwargs(model, tokenizer, [prompt], "vicuna_v1"))
    finally:
        remove()
    expected = [tokenizer.bos_token_id, *tokenizer(QUESTION, add_special_tokens=False).input_ids]
    (inputs,) = seen
    assert [row.tolist() for row in inputs.prompt_ids] == [expected]
    embed = model.get_model().embed_tokens(torch.tensor(expected))
    torch.testing.assert_close(inputs.prompt[0], embed, rtol=0, atol=0)
    assert set(vars(model)) == attributes  # nothing is parked on the model for the compressor


def test_each_image_of_a_batch_gets_its_own_samples_question(quecc_model):
    tokenizer, model, _ = quecc_model
    prompts = [_prompt("vicuna_v1", "<image>\nFirst?", None), _prompt("vicuna_v1", "<image>\nA longer second question?", None)]
    rows = [tokenizer_image_token(p, tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt") for p in prompts]
    width = max(len(r) for r in rows)
    ids = torch.zeros(2, width, dtype=torch.long)
    mask = torch.zeros(2, width, dtype=torch.long)
    for i, row in enumerate(rows):  # left padding, as generate uses
        ids[i, width - len(row):], mask[i, width - len(row):] = row, 1
    seen, remove = _seen_text(model)
    try:
        with torch.no_grad():
            model.prepare_inputs_labels_for_multimodal(ids, None, mask, None, None, torch.zeros(2, 3, 48, 48), padding_side="left",
                                                       question_ids=question_ids(prompts, tokenizer, "vicuna_v1"))
    finally:
        remove()
    got = [row.tolist() for row in seen[0].prompt_ids]
    assert got == [tokenizer("First?").input_ids, tokenizer("A longer second question?").input_ids]


def test_a_question_reading_compressor_without_question_ids_is_one_sentence(quecc_model):
    tokenizer, model, _ = quecc_model
    ids = tokenizer_image_token(_prompt("vicuna_v1", "<image>\nWhat?", None), tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt")
    with pytest.raises(ValueError, match=re.escape("'quecc_k4' conditions each image on its sample's question, but no question_ids were given")):
        model(ids.unsqueeze(0), images=torch.zeros(1, 3, 48, 48))
    with pytest.raises(ValueError, match="question_ids holds 2 questions for a batch of 1 samples"):
        model(ids.unsqueeze(0), images=torch.zeros(1, 3, 48, 48), question_ids=[ids[:2], ids[:2]])


def test_training_samples_carry_the_first_human_question_only(tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    from llava.train.preprocess import conversation_template
    from llava.train.supervised_data import DataCollatorForSupervisedDataset, LazySupervisedDataset

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))
    record = {"id": "x", "conversations": [
        {"from": "human", "value": "What is shown in the image?\n<image>"}, {"from": "gpt", "value": "A square."},
        {"from": "human", "value": "How many circles are there?"}, {"from": "gpt", "value": "Two."},
    ]}
    processor = object()  # multimodal preprocessing; the record has no image file to load
    for version, questions in (("v1", True), ("plain", True), ("v1", False)):
        turns = record if version == "v1" else {**record, "conversations": record["conversations"][:2]}
        dataset = LazySupervisedDataset([turns], tokenizer, conversation_template(version), image_processor=processor, questions=questions)
        item = dataset._item(0)
        if not questions:
            assert "question_ids" not in item
            continue
        # v1: the first question only (as QueCC's release trains); plain (stage 1): the human turn is the image alone
        expected = tokenizer("What is shown in the image?").input_ids if version == "v1" else tokenizer("").input_ids
        assert item["question_ids"].tolist() == expected
        batch = DataCollatorForSupervisedDataset(tokenizer.pad_token_id or 0, 64)([item, item])
        assert [row.tolist() for row in batch["question_ids"]] == [expected, expected]
