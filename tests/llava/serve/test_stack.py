"""Controller + model worker + gradio web server on loopback with the tiny Braco checkpoint.

Upstream-style clients: the worker's and the controller's HTTP API (NUL-separated JSON chunks) and the
web page's gradio API (``/add_text`` then ``/http_bot``, as the *Send* button does).
"""

from __future__ import annotations

import base64
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from llava.conversation import conv_templates

from .conftest import HEARTBEAT_EXPIRATION, ServingStack, png_bytes, start_worker, wait_for

QUESTION = "What is shown in the image?"


def worker_prompt(question: str = QUESTION, image: bool = True) -> str:
    conv = conv_templates["llava_v0"].copy()
    conv.append_message(conv.roles[0], ("<image>\n" if image else "") + question)
    conv.append_message(conv.roles[1], None)
    return conv.get_prompt()


def request_body(model: str, images: list[bytes] | None = None, prompt: str | None = None, **extra) -> dict:
    images = [png_bytes((40, 30))] if images is None else images
    return {
        "model": model, "prompt": worker_prompt() if prompt is None else prompt, "temperature": 0.0, "top_p": 0.7,
        "max_new_tokens": 8, "stop": "###", "images": [base64.b64encode(image).decode() for image in images], **extra,
    }


def stream(url: str, body: dict, timeout: float = 120) -> list[dict]:
    with requests.post(url + "/worker_generate_stream", json=body, stream=True, timeout=timeout) as response:
        assert response.status_code == 200, response.text
        return [json.loads(piece) for piece in response.iter_lines(delimiter=b"\0") if piece]


def answer_of(chunks: list[dict], prompt: str) -> str:
    assert chunks and all(chunk["error_code"] == 0 for chunk in chunks), chunks
    assert all(chunk["text"].startswith(prompt) for chunk in chunks)
    return chunks[-1]["text"][len(prompt):]


def test_controller_lists_the_worker(serving_stack: ServingStack) -> None:
    controller = serving_stack.controller_url
    assert serving_stack.model_name in serving_stack.models()
    def address(model: str) -> dict:
        return requests.post(controller + "/get_worker_address", json={"model": model}, timeout=10).json()

    assert address(serving_stack.model_name) == {"address": serving_stack.worker_url}
    assert address("no-such-model") == {"address": ""}
    status = requests.post(serving_stack.worker_url + "/worker_get_status", timeout=10).json()
    assert status["model_names"] == [serving_stack.model_name] and status["speed"] == 1 and status["queue_length"] >= 0
    total = requests.post(controller + "/worker_get_status", timeout=10).json()
    assert serving_stack.model_name in total["model_names"]
    stranger = {"worker_name": "http://127.0.0.1:1", "queue_length": 0}
    beat = requests.post(controller + "/receive_heart_beat", json=stranger, timeout=10)
    assert beat.json() == {"exist": False}
    assert requests.post(controller + "/get_worker_address", data=b"{not json", timeout=10).status_code == 400


def test_worker_and_controller_stream_an_answer(serving_stack: ServingStack) -> None:
    body = request_body(serving_stack.model_name, max_new_tokens=12)
    direct = stream(serving_stack.worker_url, body)
    assert len(direct) >= 2, "the answer should arrive in several chunks"
    texts = [chunk["text"] for chunk in direct]
    assert all(later.startswith(earlier) for earlier, later in zip(texts, texts[1:])), "chunks must grow"
    answer = answer_of(direct, body["prompt"])
    assert answer.strip()
    relayed = stream(serving_stack.controller_url, body)
    assert answer_of(relayed, body["prompt"]) == answer  # greedy: same answer through the controller


def test_twenty_concurrent_requests_all_get_answers(serving_stack: ServingStack) -> None:
    body = request_body(serving_stack.model_name, max_new_tokens=12)
    queue_lengths: list[int] = []

    def watch(_: int) -> None:
        while len(queue_lengths) < 1000 and not done:
            status = requests.post(serving_stack.worker_url + "/worker_get_status", timeout=10).json()
            queue_lengths.append(status["queue_length"])
            time.sleep(0.02)

    done = False
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=21) as pool:
        watcher = pool.submit(watch, 0)
        results = list(pool.map(lambda _: stream(serving_stack.worker_url, body, timeout=300), range(20)))
        done = True
        watcher.result()
    elapsed = time.monotonic() - start
    answers = [answer_of(chunks, body["prompt"]) for chunks in results]
    assert len(answers) == 20 and all(answer.strip() for answer in answers)
    assert len(set(answers)) == 1  # greedy, same request: concurrency must not mix requests up
    assert max(queue_lengths) > 5, "requests beyond --limit-model-concurrency 5 should have waited in the queue"
    print(f"20 concurrent requests answered in {elapsed:.1f} s; peak queue length {max(queue_lengths)}")


def test_bad_worker_requests_get_clear_messages_and_the_worker_carries_on(
    serving_stack: ServingStack, huge_png: Path
) -> None:
    url, model = serving_stack.worker_url, serving_stack.model_name
    cases = {
        "not an image": request_body(model, images=[b"plain text, not an image"]),
        "megapixels": request_body(model, images=[huge_png.read_bytes()]),
        "prompt is empty": request_body(model, images=[], prompt="   "),
        "marker": request_body(model, images=[png_bytes((8, 8)), png_bytes((8, 8))]),
        "temperature must be a number": request_body(model, temperature="hot"),
    }
    for expected, body in cases.items():
        chunks = stream(url, body)
        assert len(chunks) == 1 and chunks[0]["error_code"] == 1, chunks
        message = chunks[0]["text"]
        assert expected in message.lower() and message.endswith("."), message
        assert "\n" not in message and "Traceback" not in message
    assert "50.0 megapixels" in stream(url, cases["megapixels"])[0]["text"]
    response = requests.post(url + "/worker_generate_stream", data=b"[1, 2", timeout=30)
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]
    body = request_body(model)
    assert answer_of(stream(url, body), body["prompt"]).strip()  # the next request still works


def test_worker_serves_the_braco_view(serving_stack: ServingStack, not_an_image: Path) -> None:
    url = serving_stack.worker_url + "/worker_get_compressor_view"
    view = requests.post(url, json={"images": [base64.b64encode(png_bytes((40, 30))).decode()]}, timeout=60).json()
    assert view["available"] is True
    assert (view["tokens_sent"], view["tokens_uncompressed"], view["cutoff"], view["residual_tokens"]) == (9, 36, 2, 5)
    assert view["grid"] == [6, 6] and "9 visual tokens sent to the LLM" in view["summary"]
    assert base64.b64decode(view["png"]).startswith(b"\x89PNG")
    bad = requests.post(url, json={"images": [base64.b64encode(not_an_image.read_bytes()).decode()]}, timeout=60)
    assert bad.status_code == 400 and "not an image" in bad.json()["error"]


# ---------------------------------------------------------------------------------------------- gradio API


def ask_page(client, model: str, image: Path | None, question: str, max_tokens: int = 8) -> list[tuple]:
    """Send one turn as the *Send* button does; returns every streamed ``/http_bot`` update."""
    from gradio_client import handle_file

    client.predict(question, handle_file(str(image)) if image else None, "Default", api_name="/add_text")
    job = client.submit(model, 0.0, 0.7, max_tokens, api_name="/http_bot")
    job.result()
    return job.outputs()


def last_answer(chat: list[dict]) -> str:
    assert chat and chat[-1]["role"] == "assistant", chat
    return "".join(part.get("text", "") for part in chat[-1]["content"])


def test_gradio_client_gets_a_streamed_answer_and_the_braco_panel(
    serving_stack: ServingStack, tiny_image_file: Path
) -> None:
    from gradio_client import Client

    client = Client(serving_stack.web_url, verbose=False)
    outputs = ask_page(client, serving_stack.model_name, tiny_image_file, QUESTION, max_tokens=12)
    assert len(outputs) >= 2, "the page should stream several updates"
    chat, summary, panel_image = outputs[-1]
    answer = last_answer(chat)
    assert answer.strip() and not answer.endswith("▌") and "error_code" not in answer
    assert [message["role"] for message in chat] == ["user", "user", "assistant"]
    summary_text = summary["value"] if isinstance(summary, dict) else summary
    assert "9 visual tokens sent to the LLM" in summary_text and "36 uncompressed" in summary_text
    image_path = panel_image["value"] if isinstance(panel_image, dict) else panel_image
    assert Path(image_path).is_file()
    follow_up = ask_page(client, serving_stack.model_name, None, "And the colour?")
    assert last_answer(follow_up[-1][0]).strip()  # a second turn in the same conversation


def test_gradio_bad_uploads_and_empty_question_get_clear_messages(
    serving_stack: ServingStack, tiny_image_file: Path, huge_png: Path, not_an_image: Path
) -> None:
    import httpx
    from gradio_client import Client, handle_file
    from gradio_client.exceptions import AppError

    client = Client(serving_stack.web_url, verbose=False)
    # Files that are not acceptable images are refused when they are uploaded (HTTP 400, one sentence)...
    for upload, expected in ((not_an_image, "not an image"), (huge_png, "megapixels")):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            client.predict(QUESTION, handle_file(str(upload)), "Default", api_name="/add_text")
        assert refused.value.response.status_code == 400 and expected in refused.value.response.text.lower()
    # ... and an empty question when it is sent.
    with pytest.raises(AppError) as caught:
        client.predict("   ", handle_file(str(tiny_image_file)), "Default", api_name="/add_text")
    assert "question is empty" in str(caught.value).lower(), str(caught.value)
    outputs = ask_page(client, serving_stack.model_name, tiny_image_file, QUESTION)
    assert last_answer(outputs[-1][0]).strip()  # the next request still works


def test_killed_worker_is_dropped_and_the_page_says_no_model_is_available(
    serving_stack: ServingStack, tiny_image_file: Path
) -> None:
    from gradio_client import Client

    doomed_name = "llava-tiny-doomed"
    doomed, _ = start_worker(
        serving_stack.log_dir, serving_stack.controller_url, serving_stack.checkpoint, "doomed", doomed_name
    )
    try:
        def registered() -> bool:
            doomed.check_alive()
            return doomed_name in serving_stack.models()

        wait_for(registered, 180, "the second worker to register")
        doomed.process.kill()
        doomed.process.wait(timeout=30)
        killed = time.monotonic()
        waited = wait_for(
            lambda: doomed_name not in serving_stack.models(), 4 * HEARTBEAT_EXPIRATION, "the controller to drop it"
        )
        assert waited >= HEARTBEAT_EXPIRATION * 0.5, "dropped before its heartbeat could have expired"
        print(f"dead worker dropped {time.monotonic() - killed:.1f} s after it was killed")
    finally:
        doomed.stop()
    assert serving_stack.model_name in serving_stack.models()  # the healthy worker stays

    client = Client(serving_stack.web_url, verbose=False)
    start = time.monotonic()
    outputs = ask_page(client, doomed_name, tiny_image_file, QUESTION)
    assert time.monotonic() - start < 30
    message = last_answer(outputs[-1][0])
    assert "no model is available" in message.lower() and doomed_name in message


def test_a_client_that_goes_away_frees_the_worker(serving_stack: ServingStack) -> None:
    """The worker's concurrency slot comes back when a client disconnects mid-answer (test_engine checks that
    the generation itself stops)."""
    url = serving_stack.worker_url
    body = request_body(serving_stack.model_name, max_new_tokens=1000, stop=None)
    response = requests.post(url + "/worker_generate_stream", json=body, stream=True, timeout=60)
    next(response.iter_lines(delimiter=b"\0"))  # the answer has started
    response.close()
    def idle() -> bool:
        return requests.post(url + "/worker_get_status", timeout=10).json()["queue_length"] == 0

    waited = wait_for(idle, 20, "the worker to free the abandoned request's slot")
    print(f"abandoned generation stopped within {waited:.1f} s")
