"""The demo takes a video (issue 23): the page's video box, the engine's ``videos`` request field (one base64
video, frames by LLaVA-NeXT's rule), and the compressor panel for its sampled frames."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest

from llava.video import write_video

from .test_demo import launch_demo  # noqa: F401  (the fixture)
from .test_stack import ask_page, last_answer


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    frames = np.zeros((6, 32, 48, 3), dtype=np.uint8)
    for index in range(6):
        frames[index, 8:20, 6 * index : 6 * index + 12] = (230, 40, 40)
    return Path(write_video(tmp_path_factory.mktemp("clip") / "square.mp4", frames, fps=3))


def test_demo_answers_about_a_video_and_shows_its_frames(launch_demo, braco_checkpoint: Path, clip: Path) -> None:  # noqa: F811
    from gradio_client import Client, handle_file

    client = Client(launch_demo(braco_checkpoint), verbose=False)
    client.predict(handle_file(str(clip)), api_name="/set_video")
    chat, summary, panel_image = ask_page(client, braco_checkpoint.name, None, "Where does the square go?", max_tokens=6)[-1]
    answer = last_answer(chat)
    assert "error_code" not in answer
    # 16 frames (the served default, evenly spread over 6), Braco c2s5: 9 tokens each, flat merge: no newlines.
    assert "**144 visual tokens for 16 frames**" in summary["value"] and Path(panel_image["value"]).is_file()


def test_engine_video_requests(braco_engine, clip: Path) -> None:
    video = base64.b64encode(clip.read_bytes()).decode("ascii")
    chunks = list(braco_engine.generate_stream({"prompt": "USER: <image>\nWhat moves? ASSISTANT:", "videos": [video], "max_new_tokens": 3, "temperature": 0}))
    assert chunks[-1].error_code == 0
    both = list(braco_engine.generate_stream({"prompt": "<image> hi", "videos": [video], "images": [video]}))
    assert both[-1].error_code != 0 and "either images or one video" in both[-1].text
    broken = list(braco_engine.generate_stream({"prompt": "<image> hi", "videos": [base64.b64encode(b"nope" * 40).decode()]}))
    assert broken[-1].error_code != 0 and "neither an image nor a video this server can read" in broken[-1].text
    view = braco_engine.compressor_view({"videos": [video]})
    assert view["available"] and view["frames"] == 16 and view["video_tokens"] == 144


def test_engine_refuses_a_prompt_over_the_models_limit_before_decoding(braco_engine, clip: Path, monkeypatch) -> None:
    # Issue 31 (V01's worker side): the worker checked only max_position_embeddings, after decoding the frames,
    # while the splice cut at tokenizer_model_max_length; both limits are held now, the frames decoded only if they fit.
    from llava.video import VideoPlan

    decoded = []
    original = VideoPlan.decode
    monkeypatch.setattr(VideoPlan, "decode", lambda self: decoded.append(self) or original(self))
    monkeypatch.setattr(braco_engine.model.config, "tokenizer_model_max_length", 100, raising=False)
    video = base64.b64encode(clip.read_bytes()).decode("ascii")
    prompt = "USER: <image>\nWhat moves? ASSISTANT:"
    chunks = list(braco_engine.generate_stream({"prompt": prompt, "videos": [video], "max_new_tokens": 3, "temperature": 0}))
    assert chunks[-1].error_code != 0 and decoded == []
    assert "with its visual tokens, more than the 100 this model takes (tokenizer_model_max_length); clear the history" in chunks[-1].text
    from PIL import Image

    from llava.serve.images import encode_image_base64

    image = encode_image_base64(Image.new("RGB", (32, 32), (10, 200, 10)))
    monkeypatch.setattr(braco_engine.model.config, "tokenizer_model_max_length", 5, raising=False)
    chunks = list(braco_engine.generate_stream({"prompt": prompt, "images": [image], "max_new_tokens": 3, "temperature": 0}))
    assert chunks[-1].error_code != 0 and "more than the 5 this model takes (tokenizer_model_max_length)" in chunks[-1].text
