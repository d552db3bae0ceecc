"""``llava.eval.run_llava`` answers a query about images, in a conversation template that fits the tokenizer."""

from __future__ import annotations

import pytest

from llava.constants import IMAGE_PLACEHOLDER
from llava.eval import run_llava


def _argv(checkpoint, image_file, *extra: str) -> list[str]:
    return ["--model-path", str(checkpoint), "--image-file", str(image_file), "--device", "cpu",
            "--temperature", "0", "--max_new_tokens", "4", *extra]


def test_prints_an_answer(tiny_llava_checkpoint, tiny_image_file, capsys) -> None:
    answer = run_llava.main(_argv(tiny_llava_checkpoint("mlp2x_gelu"), tiny_image_file, "--query", "What is it?"))
    assert capsys.readouterr().out == answer + "\n"
    again = run_llava.main(_argv(tiny_llava_checkpoint("mlp2x_gelu"), tiny_image_file, "--query", f"{IMAGE_PLACEHOLDER}\nWhat is it?"))
    assert again == answer  # the placeholder is where the prepended <image> would have gone


def test_several_images(tiny_llava_checkpoint, tiny_image_file, capsys) -> None:
    images = f"{tiny_image_file};{tiny_image_file}"
    answer = run_llava.main(_argv(tiny_llava_checkpoint("mlp2x_gelu"), images, "--sep", ";", "--query", "Same?"))
    assert isinstance(answer, str)


def test_corrupt_image_file(tiny_llava_checkpoint, tmp_path) -> None:
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"\xff\xd8 truncated")
    with pytest.raises(ValueError, match=r"image file '.*broken\.jpg' is not a readable image"):
        run_llava.main(_argv(tiny_llava_checkpoint("mlp2x_gelu"), broken, "--query", "What is it?"))


def test_conversation_template_must_fit_the_tokenizer(tiny_llava_checkpoint, tiny_image_file) -> None:
    argv = _argv(tiny_llava_checkpoint("mlp2x_gelu"), tiny_image_file, "--query", "What is it?", "--conv-mode", "qwen_1_5")
    with pytest.raises(ValueError, match=r"conversation template 'qwen_1_5' needs '<\|im_start\|>' and '<\|im_end\|>'"):
        run_llava.main(argv)


def test_a_plain_language_model_is_refused_before_it_loads(tiny_base_llm, tiny_image_file, tmp_path, monkeypatch) -> None:
    # A Vicuna-style LLM in a folder named like a LLaVA checkpoint loads as a language model without an image
    # processor; the image then failed deep in preprocessing ("'NoneType' object is not callable").
    import shutil

    from llava.model import builder

    folder = tmp_path / "llava-vicuna-text-only"
    shutil.copytree(tiny_base_llm, folder)
    monkeypatch.setattr(builder, "load_pretrained_model", lambda *args, **kwargs: pytest.fail("loaded the model"))
    with pytest.raises(ValueError, match=r"llava-vicuna-text-only' is a plain language model \(its config\.json names no "
                                         r"mm_vision_tower\), so it cannot read images; pass a LLaVA checkpoint"):
        run_llava.main(_argv(folder, tiny_image_file, "--query", "What is it?"))


def test_query_markers() -> None:
    class Config:
        mm_use_im_start_end = False

    assert run_llava.build_query("Hi", 2, Config()) == "<image>\n<image>\nHi"
    assert run_llava.build_query("<image>\nHi", 1, Config()) == "<image>\nHi"
    Config.mm_use_im_start_end = True
    assert run_llava.build_query(f"A {IMAGE_PLACEHOLDER} B", 1, Config()) == "A <im_start><image><im_end> B"
