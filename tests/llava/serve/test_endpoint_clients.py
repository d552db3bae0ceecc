"""The demo's and ``llava.serve.cli``'s ``--endpoint``: an OpenAI-compatible server (a loopback fake here; the real
``vllm serve`` in ``make vllm-check``) answers the page's conversation and the terminal chat, streamed; a server
that fails, hangs or redirects elsewhere becomes one sentence."""

from __future__ import annotations

import base64
import io
import threading
import time
from pathlib import Path

import pytest
from PIL import Image

from llava.conversation import conv_templates
from llava.openai_client import ChatEndpoint, conversation_messages
from llava.serve import cli, gradio_web_server
from llava.serve.backends import EndpointBackend
from llava.utils import UserError

from ..fake_openai import fake_openai
from ..http_server import scripted_server


def describe(question: str, images: list, body: dict) -> str:
    sizes = ",".join(f"{image.width}x{image.height}" for image in images)
    return f"{len(body['messages'])} turns; {question!r}; images {sizes or 'none'}"


def _png_b64(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def _page_payload(model: str) -> dict:
    """What chat_ui's http_bot sends on the second round of a conversation about a 40x30 image."""
    image = Image.new("RGB", (40, 30), (200, 40, 30))
    conv = conv_templates["llava_v1"].copy()
    conv.append_message(conv.roles[0], ("What is this?\n<image>", image, "Default"))
    conv.append_message(conv.roles[1], "A red block.")
    conv.append_message(conv.roles[0], "And its colour?")
    conv.append_message(conv.roles[1], None)
    return {"model": model, "prompt": conv.get_prompt(), "temperature": 0.0, "top_p": 0.7, "max_new_tokens": 16,
            "stop": "</s>", "images": conv.get_images(), "messages": conversation_messages(conv)}


def test_the_page_streams_the_endpoints_answer_to_its_conversation() -> None:
    with fake_openai("llava-served", describe) as server:
        backend = EndpointBackend(ChatEndpoint(server.url))
        assert backend.list_models() == ["llava-served"]
        payload = _page_payload("llava-served")
        chunks = list(backend.stream(payload))
    assert all(chunk.ok for chunk in chunks) and len(chunks) > 2  # streamed in pieces
    assert chunks[-1].text == payload["prompt"] + "3 turns; 'And its colour?'; images none"
    body = server.bodies[0]
    assert body["stream"] is True and body["stop"] == ["</s>"] and body["temperature"] == 0.0 and body["max_tokens"] == 16
    first = body["messages"][0]["content"]
    assert [part["type"] for part in first] == ["image_url", "text"] and first[1]["text"] == "What is this?"
    assert body["messages"][1:] == [{"role": "assistant", "content": "A red block."}, {"role": "user", "content": "And its colour?"}]
    assert backend.compressor_view("llava-served", payload["images"]) == {"available": False}


def test_a_failing_endpoint_is_one_sentence_on_the_page() -> None:
    with scripted_server(lambda handled: handled.reply(500, b'{"error": {"message": "boom"}}')) as server:
        chunks = list(EndpointBackend(ChatEndpoint(server.url + "/v1")).stream(_page_payload("m")))
    assert len(chunks) == 1 and not chunks[0].ok
    assert chunks[0].text == f"The endpoint {server.url}/v1 refused /chat/completions: HTTP 500 (boom)."


def test_an_endpoint_redirecting_elsewhere_is_refused_on_the_page() -> None:
    with scripted_server(lambda handled: handled.reply(200, b"{}")) as elsewhere:
        target = elsewhere.url.replace("127.0.0.1", "localhost") + "/steal"
        with scripted_server(lambda handled: handled.reply(307, b"", {"Location": target})) as server:
            chunks = list(EndpointBackend(ChatEndpoint(server.url + "/v1")).stream(_page_payload("m")))
    assert not chunks[0].ok and "redirected to another origin" in chunks[0].text and elsewhere.requests == []


def test_the_page_refuses_a_bad_endpoint_before_starting() -> None:
    with pytest.raises(UserError, match=r"^--endpoint 'file:///tmp/x' is not an http:// or https:// URL with a host"):
        gradio_web_server.main(["--endpoint", "file:///tmp/x"], block=False)


def test_the_cli_chats_through_the_endpoint(tiny_image_file: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("What is in the image?\nAnd the colour?\n"))
    with fake_openai("llava-served", describe) as server:
        cli.main(["--endpoint", server.url, "--image-file", str(tiny_image_file), "--temperature", "0", "--max-new-tokens", "9"])
    out = capsys.readouterr().out
    assert "assistant: 1 turns; 'What is in the image?'; images 40x30\n" in out
    assert "assistant: 3 turns; 'And the colour?'; images none\n" in out
    assert out.rstrip().endswith("exit...")
    second = server.bodies[1]["messages"]
    assert second[1] == {"role": "assistant", "content": "1 turns; 'What is in the image?'; images 40x30"}
    assert all(body["max_tokens"] == 9 and body["temperature"] == 0 for body in server.bodies)


def test_the_cli_is_cut_at_the_deadline_of_a_hanging_endpoint(tiny_image_file: Path, monkeypatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    monkeypatch.setattr("sys.stdin", io.StringIO("Hi?\n"))
    release = threading.Event()
    with scripted_server(lambda handled: release.wait(30)) as server:
        start = time.monotonic()
        with pytest.raises(UserError, match=r"did not answer within 1 s"):
            cli.main(["--endpoint", server.url + "/v1", "--image-file", str(tiny_image_file), "--request-timeout", "1"])
        release.set()
    assert time.monotonic() - start < 10


def test_the_cli_refuses_a_video_with_an_endpoint(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"^with --endpoint, give --image-file \(the endpoint takes images, not videos\)$"):
        cli.main(["--endpoint", "http://127.0.0.1:9/v1", "--video-file", str(tmp_path / "v.mp4")])


def test_the_conversation_becomes_chat_messages_with_the_images_first() -> None:
    image = Image.new("RGB", (8, 8))
    conv = conv_templates["v0"].copy()  # a template with few-shot turns: they stay the template's
    conv.append_message(conv.roles[0], "<image>\nHi")
    conv.append_message(conv.roles[1], None)
    messages = conversation_messages(conv, [image])
    assert len(messages) == 1 and messages[0]["content"][1] == {"type": "text", "text": "Hi"}
    assert messages[0]["content"][0]["image_url"]["url"] == "data:image/png;base64," + _png_b64(image)
