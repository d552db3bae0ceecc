"""``--backend openai --endpoint URL`` on the loaders, against a loopback OpenAI-compatible server: the same answers
file as the local backend (the fake server answers with the same tiny checkpoint, from the images it decodes from
the data URLs), a record that names the endpoint (so a resume with the other backend is refused), and one sentence
for every misbehaving endpoint or bad flag, with nothing written."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from llava.eval import core, model_vqa, model_vqa_loader
from llava.utils import UserError

from ..fake_openai import fake_openai
from ..http_server import scripted_server
from .conftest import BenchData

MAX_NEW = "6"


@pytest.fixture(scope="module")
def checkpoint(tiny_llava_checkpoint) -> Path:
    return tiny_llava_checkpoint("mlp2x_gelu")


@pytest.fixture(scope="module")
def generator(checkpoint: Path) -> core.LlavaGenerator:
    return core.load_generator(str(checkpoint), None, "vicuna_v1", "cpu")[0]


def answer_with(generator: core.LlavaGenerator):
    def answer(question: str, images: list, body: dict[str, Any]) -> str:
        config = core.GenerationConfig(body["temperature"], body.get("top_p"), 1, body["max_tokens"])
        return generator.generate([question], [images], config)[0]

    return answer


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def argv(bench_data: BenchData, answers: Path, *extra: str) -> list[str]:
    return ["--question-file", str(bench_data.vqa), "--image-folder", str(bench_data.images), "--answers-file", str(answers),
            "--temperature", "0", "--conv-mode", "vicuna_v1", "--max_new_tokens", MAX_NEW, "--device", "cpu", *extra]


def without_answer_id(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: value for key, value in record.items() if key != "answer_id"} for record in records]


def test_the_endpoint_writes_the_answers_the_local_model_writes(checkpoint: Path, generator, bench_data: BenchData, tmp_path: Path) -> None:
    local = tmp_path / "local.jsonl"
    model_vqa_loader.main(argv(bench_data, local, "--model-path", str(checkpoint)))
    with fake_openai(str(checkpoint), answer_with(generator)) as server:
        remote = tmp_path / "remote.jsonl"
        result = model_vqa_loader.main(argv(bench_data, remote, "--backend", "openai", "--endpoint", server.url, "--batch-size", "3"))
    assert result.answered == len(bench_data.vqa_ids)
    assert without_answer_id(lines(remote)) == without_answer_id(lines(local))
    assert lines(remote)[0]["model_id"] == checkpoint.name  # the served model's name, as --model-path gives it locally
    body = server.bodies[0]
    assert body["model"] == str(checkpoint) and body["temperature"] == 0 and body["max_tokens"] == int(MAX_NEW)
    parts = body["messages"][0]["content"]
    assert [part["type"] for part in parts] == ["image_url", "text"] and parts[0]["image_url"]["url"].startswith("data:image/png;base64,")
    record = json.loads(Path(str(remote) + ".meta.json").read_text())["producer"]
    assert record["backend"] == "openai" and record["model"] == {"endpoint": server.url, "served_model": str(checkpoint)}


def test_a_resume_with_the_other_backend_is_refused(checkpoint: Path, generator, bench_data: BenchData, tmp_path: Path) -> None:
    answers = tmp_path / "a.jsonl"
    with fake_openai(str(checkpoint), answer_with(generator)) as server:
        model_vqa_loader.main(argv(bench_data, answers, "--backend", "openai", "--endpoint", server.url))
    before = answers.read_bytes()
    with pytest.raises(UserError, match=r"was produced with other settings \(backend 'openai' -> None;"):
        model_vqa_loader.main(argv(bench_data, answers, "--model-path", str(checkpoint)))
    assert answers.read_bytes() == before


def test_the_question_images_reach_the_endpoint_unchanged(bench_data: BenchData, tmp_path: Path) -> None:
    from llava.mm_utils import load_image

    received: list = []

    def answer(question: str, images: list, body: dict[str, Any]) -> str:
        received.append((question, images))
        return "yes"

    with fake_openai("served/llava-x", answer) as server:
        model_vqa.main(argv(bench_data, tmp_path / "a.jsonl", "--backend", "openai", "--endpoint", server.url))
    questions = [json.loads(line) for line in bench_data.vqa.read_text().splitlines()]
    assert [question for question, _ in received] == [record["text"] for record in questions]
    for (_, images), record in zip(received, questions):
        original = load_image(bench_data.images / record["image"])
        assert len(images) == 1 and images[0].tobytes() == original.tobytes()
    assert {line["model_id"] for line in lines(tmp_path / "a.jsonl")} == {"llava-x"}


# ------------------------------------------------------------------------------------------------ faults


def refused(bench_data: BenchData, tmp_path: Path, *extra: str) -> str:
    answers = tmp_path / "answers.jsonl"
    with pytest.raises(UserError) as caught:
        model_vqa_loader.main(argv(bench_data, answers, *extra))
    assert not answers.exists() and not Path(str(answers) + ".meta.json").exists()
    return str(caught.value)


def test_an_endpoint_that_hangs_is_cut_at_the_deadline(bench_data: BenchData, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda seconds: None)  # the pauses between retries
    release = threading.Event()
    with scripted_server(lambda handled: release.wait(30)) as server:
        start = time.monotonic()
        message = refused(bench_data, tmp_path, "--backend", "openai", "--endpoint", server.url + "/v1", "--request-timeout", "1")
        release.set()
    assert time.monotonic() - start < 10
    assert message == f"the endpoint {server.url}/v1 still fails after 2 retries ({server.url}/v1/models did not answer within 1 s)"


def test_a_redirect_to_another_origin_is_not_followed_and_the_key_stays(bench_data: BenchData, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    with scripted_server(lambda handled: handled.reply(200, b'{"data": [{"id": "stolen"}]}')) as elsewhere:
        target = elsewhere.url.replace("127.0.0.1", "localhost") + "/v1/models"
        with scripted_server(lambda handled: handled.reply(302, b"", {"Location": target})) as server:
            message = refused(bench_data, tmp_path, "--backend", "openai", "--endpoint", server.url + "/v1")
    assert "redirected to another origin" in message and "the redirect was not followed" in message
    assert elsewhere.requests == [] and server.requests[0].headers["Authorization"] == "Bearer sk-secret"
    assert "sk-secret" not in message


def test_an_oversized_reply_is_refused(bench_data: BenchData, tmp_path: Path) -> None:
    with scripted_server(lambda handled: handled.reply(200, b"x" * (9 * 1024 * 1024))) as server:
        message = refused(bench_data, tmp_path, "--backend", "openai", "--endpoint", server.url + "/v1")
    assert message.endswith("sent a reply of 9.0 MiB, more than the 8.0 MiB accepted")


def test_a_reply_that_is_not_json_is_named(bench_data: BenchData, tmp_path: Path) -> None:
    with scripted_server(lambda handled: handled.reply(200, b"<html>hello</html>")) as server:
        message = refused(bench_data, tmp_path, "--backend", "openai", "--endpoint", server.url + "/v1")
    assert message == (f"the endpoint {server.url}/v1 answered /models with something that is not JSON ('<html>hello</html>'); "
                       "is it an OpenAI-compatible server?")


def test_a_refused_key_is_one_sentence(bench_data: BenchData, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    reply = json.dumps({"error": {"message": "Unauthorized"}}).encode()
    with scripted_server(lambda handled: handled.reply(401, reply)) as server:
        message = refused(bench_data, tmp_path, "--backend", "openai", "--endpoint", server.url + "/v1")
    assert message == f"the endpoint {server.url}/v1 refused /models: HTTP 401 (Unauthorized); set OPENAI_API_KEY to the server's key"


def test_a_key_with_a_line_break_is_refused_without_showing_it(bench_data: BenchData, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-abc\r\nX-Evil: 1")
    with scripted_server(lambda handled: handled.reply(200, b"{}")) as server:
        message = refused(bench_data, tmp_path, "--backend", "openai", "--endpoint", server.url + "/v1")
    # The one rule for keys (llava.endpoints.check_secret), as the judge applies it: named, never shown.
    assert message == ("OPENAI_API_KEY holds a carriage return (\\r) at position 7 of 17 (e.g. from a Windows .env file); "
                       "remove it (nothing was sent)")
    assert "sk-abc" not in message and "Evil" not in message
    assert server.requests == []


@pytest.mark.parametrize(("endpoint", "expected"), [
    ("ftp://127.0.0.1/v1", "--endpoint 'ftp://127.0.0.1/v1' is not an http:// or https:// URL with a host; e.g. http://127.0.0.1:8000/v1"),
    ("http://user:hunter2@127.0.0.1:9/v1", "--endpoint holds a user name or password before the host; remove it and pass the key on its own"),
    ("http://127.0.0.1:9/v1#top", "--endpoint 'http://127.0.0.1:9/v1#top' has a fragment ('#...'), which is never sent; remove it"),
    ("http://127.0.0.1:99999/v1", "--endpoint 'http://127.0.0.1:99999/v1' has a bad port; e.g. http://127.0.0.1:8000/v1"),
])
def test_a_bad_endpoint_url_is_one_sentence(bench_data: BenchData, tmp_path: Path, endpoint: str, expected: str) -> None:
    assert refused(bench_data, tmp_path, "--backend", "openai", "--endpoint", endpoint) == expected


@pytest.mark.parametrize(("extra", "expected"), [
    (["--backend", "openai"], "--backend openai needs --endpoint URL, the API root, e.g. http://127.0.0.1:8000/v1"),
    (["--endpoint", "http://127.0.0.1:9/v1"], "--endpoint is for --backend openai; add --backend openai, or drop --endpoint"),
    (["--backend", "openai", "--endpoint", "http://127.0.0.1:9/v1", "--num_beams", "2"],
     "--num_beams 2: an OpenAI-compatible endpoint has no beam search; use --num_beams 1 or --backend local"),
    (["--backend", "openai", "--endpoint", "http://127.0.0.1:9/v1", "--reducer", "fastv_k1_r50"],
     "--reducer fastv_k1_r50 runs inside a model loaded here, and the endpoint would answer without it; use --backend local, "
     "or drop --reducer"),
    (["--backend", "openai", "--endpoint", "http://127.0.0.1:9/v1", "--request-timeout", "nan"],
     "--request-timeout must be a positive number of seconds, got nan"),
    (["--backend", "openai", "--endpoint", "http://127.0.0.1:9/v1", "--request-timeout", "-1"],
     "--request-timeout must be a positive number of seconds, got -1.0"),
])
def test_bad_backend_flags_are_one_sentence(bench_data: BenchData, tmp_path: Path, extra: list[str], expected: str) -> None:
    assert refused(bench_data, tmp_path, *extra) == expected


def test_an_endpoint_serving_another_model_names_what_it_serves(bench_data: BenchData, tmp_path: Path) -> None:
    with fake_openai("served/llava-a", lambda *a: "") as server:
        message = refused(bench_data, tmp_path, "--backend", "openai", "--endpoint", server.url, "--served-model", "llava-b")
    assert message == f"the endpoint {server.url} does not serve 'llava-b'; it serves: served/llava-a"


def test_an_endpoint_that_is_down_is_one_sentence(bench_data: BenchData, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    with scripted_server(lambda handled: None) as server:
        url = server.url + "/v1"
    message = refused(bench_data, tmp_path, "--backend", "openai", "--endpoint", url)
    assert message.startswith(f"the endpoint {url} still fails after 2 retries ({url}/models cannot be reached (ConnectionRefusedError")


def test_video_questions_are_refused_before_the_endpoint_is_asked(tmp_path: Path) -> None:
    from llava.eval import model_vqa_video

    questions = tmp_path / "videos.jsonl"
    questions.write_text(json.dumps({"question_id": 1, "video": "clip.mp4", "text": "What happens?"}) + "\n")
    with scripted_server(lambda handled: handled.reply(200, b"{}")) as server:
        with pytest.raises(UserError, match=r"^--backend openai sends images, not videos; answer video questions with --backend local$"):
            model_vqa_video.main(["--question-file", str(questions), "--video-folder", str(tmp_path), "--answers-file",
                                  str(tmp_path / "a.jsonl"), "--backend", "openai", "--endpoint", server.url + "/v1"])
    assert server.requests == [] and not (tmp_path / "a.jsonl").exists()


def test_the_endpoint_follows_the_one_rule_for_api_urls_a_query_is_kept() -> None:
    # The judge's rule (llava.endpoints.join_url), not a second one: the route goes on the root's path, and a query
    # such as Azure's ?api-version= stays on every call instead of being refused.
    from llava.openai_client import ChatEndpoint

    models = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
    with scripted_server(lambda handled: handled.reply(200, models)) as server:
        assert ChatEndpoint(server.url + "/v1/?api-version=7", timeout=5).served_models() == ["m"]
    assert [seen.path for seen in server.requests] == ["/v1/models?api-version=7"]
