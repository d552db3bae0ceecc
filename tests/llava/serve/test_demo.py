"""``python -m llava.serve.demo``: the same page with the model in this process, no controller."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import free_port
from .test_stack import ask_page, last_answer


@pytest.fixture()
def launch_demo():
    from llava.serve import demo

    apps = []

    def start(checkpoint: Path) -> str:
        port = free_port()
        apps.append(demo.main(["--model-path", str(checkpoint), "--device", "cpu", "--port", str(port)], block=False))
        return f"http://127.0.0.1:{port}"

    yield start
    for app in apps:
        app.close()


def test_demo_answers_and_shows_the_braco_panel(launch_demo, braco_checkpoint: Path, tiny_image_file: Path) -> None:
    from gradio_client import Client

    client = Client(launch_demo(braco_checkpoint), verbose=False)
    outputs = ask_page(client, braco_checkpoint.name, tiny_image_file, "What is shown in the image?", max_tokens=16)
    chat, summary, panel_image = outputs[-1]
    first = last_answer(chat)
    assert first.strip()
    assert "9 visual tokens sent to the LLM" in summary["value"] and Path(panel_image["value"]).is_file()

    client.predict("Default", api_name="/regenerate")
    again = client.submit(braco_checkpoint.name, 0.0, 0.7, 16, api_name="/http_bot")
    again.result()
    assert last_answer(again.outputs()[-1][0]) == first  # greedy: the same answer again
    cleared = client.predict(api_name="/clear_history")
    assert cleared[0] == []

    wrong = ask_page(client, "some-other-model", tiny_image_file, "Hi?")
    assert "no model is available" in last_answer(wrong[-1][0]).lower()


def test_demo_has_no_braco_panel_for_other_projectors(
    launch_demo, tiny_llava_checkpoint, tiny_image_file: Path
) -> None:
    from gradio_client import Client

    checkpoint = tiny_llava_checkpoint("mlp2x_gelu")
    client = Client(launch_demo(checkpoint), verbose=False)
    chat, summary, panel_image = ask_page(client, checkpoint.name, tiny_image_file, "What is shown?")[-1]
    assert last_answer(chat).strip()
    assert summary["value"] == "" and panel_image["value"] is None
