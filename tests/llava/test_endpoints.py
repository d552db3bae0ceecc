"""The one rule for an API's base URL and key (``llava.endpoints``) and the requests ``llava.net`` refuses to build,
against a scripted server on 127.0.0.1: fault cases J02 (a key with a CR from a Windows ``.env`` file was printed
three times and retried as "cannot be reached") and J05 (``/chat/completions`` appended after an Azure-style
query), and old-K05 (a JSON body nested 200 000 deep was a 500 with a RecursionError)."""

from __future__ import annotations

import json

import pytest

from llava import net
from llava.endpoints import Endpoint, api_endpoint, check_secret, join_url, mask_secret
from llava.utils import UserError

from .http_server import Handled, scripted_server

KEY = "sk-SECRET-KEY-1234"


def _echo(handled: Handled) -> None:
    handled.reply(200, json.dumps({"path": handled.seen.path}).encode())


def test_j05_the_route_goes_on_the_path_and_the_query_is_kept() -> None:
    url = join_url("http://127.0.0.1:9/openai/deployments/gpt4?api-version=2024-02-01", "/chat/completions")
    assert url == "http://127.0.0.1:9/openai/deployments/gpt4/chat/completions?api-version=2024-02-01"
    assert join_url("HTTPS://api.example.com/v1/", "/chat/completions") == "https://api.example.com/v1/chat/completions"
    assert join_url("http://h:8000", "chat/completions") == "http://h:8000/chat/completions"
    with scripted_server(_echo) as server:
        endpoint = api_endpoint(server.url + "/openai/deployments/gpt4?api-version=2024-02-01", "/chat/completions")
        net.request("POST", endpoint.url, json={}, deadline=5, max_bytes=1024)
    assert server.requests[0].path == "/openai/deployments/gpt4/chat/completions?api-version=2024-02-01"


@pytest.mark.parametrize(("base", "message"), [
    ("ftp://h/v1", "is not an http:// or https:// URL with a host"),
    ("http:///v1", "is not an http:// or https:// URL with a host"),
    ("http://h:99999/v1", "has a bad port"),
    ("http://user:pw@h/v1", "holds a user name or password before the host; remove it"),
    ("http://h/v1#frag", "has a fragment"),
    ("http://h/v1\r", r"holds a carriage return \(\\r\) at its end; remove it"),
    ("http://h/v 1", "holds a space at position 11 of 12"),
])
def test_a_malformed_base_url_is_one_sentence_naming_the_variable(base: str, message: str) -> None:
    with pytest.raises(UserError, match=r"^OPENAI_BASE_URL.*" + message):
        api_endpoint(base, "/chat/completions", base_name="OPENAI_BASE_URL")


@pytest.mark.parametrize(("key", "message"), [
    (KEY + "\r", r"holds a carriage return \(\\r\) at its end \(e\.g\. from a Windows \.env file\); remove it"),
    (KEY + "\n", r"holds a line feed \(\\n\) at its end"),
    (" " + KEY, "holds a space at its start"),
    ("sk-SECRET\tKEY", "holds a tab at position 10 of 13"),
    ("sk-SÉCRET", "holds the non-ASCII character U\\+00C9 at position 5 of 9"),
])
def test_j02_a_key_http_cannot_carry_is_refused_and_never_shown(key: str, message: str) -> None:
    with pytest.raises(UserError, match="^OPENAI_API_KEY " + message) as refused:
        check_secret(key, "OPENAI_API_KEY")
    assert "SECRET" not in str(refused.value) and "1234" not in str(refused.value)


def test_a_key_is_shown_as_its_last_4_characters_at_most() -> None:
    assert mask_secret(KEY) == "...1234"
    assert mask_secret("sk-short") == "(hidden)" and mask_secret(None) == "(none)"
    endpoint = api_endpoint("http://h/v1", "/chat/completions", KEY)
    assert endpoint.headers() == {"Authorization": f"Bearer {KEY}"} and endpoint.key_hint == "...1234"
    assert KEY not in repr(endpoint) and Endpoint("http://h").headers() == {}


def test_a_header_http_cannot_carry_is_refused_before_anything_is_sent() -> None:
    # Before: http.client's ValueError ("Invalid header value b'Bearer sk-...\r'") became ConnectFailed with the
    # key in its text, which the judge printed and retried as if the endpoint could not be reached.
    with scripted_server(_echo) as server:
        with pytest.raises(net.RequestInvalid) as refused:
            net.request("POST", server.url + "/v1", json={}, headers={"Authorization": f"Bearer {KEY}\r"}, deadline=5,
                        max_bytes=1024)
        with pytest.raises(net.RequestInvalid, match="holds a space"):
            net.request("GET", server.url + "/a b", deadline=5, max_bytes=1024)
    assert server.requests == []
    message = str(refused.value)
    assert "'Authorization' header" in message and "carriage return" in message and "SECRET" not in message
    assert isinstance(refused.value, UserError) and isinstance(refused.value, net.NetError)


def test_k05_json_nested_too_deeply_is_a_value_error() -> None:
    deep = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(ValueError, match=r"^the body is not valid JSON \(nested too deeply\)$"):
        net.parse_json(deep)
    with pytest.raises(ValueError, match=r"^a reply is not valid JSON \(Expecting property name"):
        net.parse_json(b"{", "a reply")
    assert net.parse_json(b"[[1]]") == [[1]]


def test_the_serving_clients_join_their_routes_the_same_way() -> None:
    # The controller's address had "/register_worker" (and the other routes) appended to the whole URL, as J05's.
    from llava.serve.backends import ControllerBackend
    from llava.serve.register_worker import register_worker

    def answer(handled: Handled) -> None:
        handled.reply(200, json.dumps({"registered": True, "models": []}).encode())

    with scripted_server(answer) as server:
        assert register_worker(server.url + "/proxy/?tenant=a", "http://127.0.0.1:1")
        assert ControllerBackend(server.url + "/proxy?tenant=a").list_models() == []
    assert [seen.path for seen in server.requests] == ["/proxy/register_worker?tenant=a", "/proxy/refresh_all_workers?tenant=a",
                                                      "/proxy/list_models?tenant=a"]
