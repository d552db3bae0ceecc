"""``llava.eval.run_llava`` answers a query about images and picks upstream's conversation mode."""

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


@pytest.mark.parametrize(
    "name, mode",
    [
        ("llava-v1.5-7b", "llava_v1"),
        ("llava-llama-2-13b-chat", "llava_llama_2"),
        ("llava-v1.6-mistral-7b", "mistral_instruct"),
        ("llava-v1.6-34b", "chatml_direct"),
        ("llava-mpt-7b", "mpt"),
        ("llava-tiny", "llava_v0"),
    ],
)
def test_conv_mode_from_model_name(name, mode) -> None:
    assert run_llava.conv_mode_for_model(name) == mode


def test_query_markers() -> None:
    class Config:
        mm_use_im_start_end = False

    assert run_llava.build_query("Hi", 2, Config()) == "<image>\n<image>\nHi"
    assert run_llava.build_query("<image>\nHi", 1, Config()) == "<image>\nHi"
    Config.mm_use_im_start_end = True
    assert run_llava.build_query(f"A {IMAGE_PLACEHOLDER} B", 1, Config()) == "A <im_start><image><im_end> B"
