"""The controller's registry in-process: dispatch, heartbeat expiry, refresh, and answers when no worker serves."""

from __future__ import annotations

import json
import time

import pytest

from llava.serve.controller import Controller, build_parser

from .conftest import free_port


def status(*models: str, queue_length: int = 0, speed: float = 1) -> dict:
    return {"model_names": list(models), "speed": speed, "queue_length": queue_length}


def test_register_list_and_shortest_queue_dispatch() -> None:
    controller = Controller("shortest_queue")
    assert controller.register_worker("http://a", True, status("m1", queue_length=3))
    assert controller.register_worker("http://b", True, status("m1", "m2", queue_length=1))
    assert controller.list_models() == ["m1", "m2"]
    assert controller.get_worker_address("m2") == "http://b"
    picks = [controller.get_worker_address("m1") for _ in range(4)]
    assert picks == ["http://b", "http://a", "http://b", "http://a"]  # each pick counts until the next heartbeat
    assert controller.get_worker_address("unknown") == ""


def test_lottery_picks_only_workers_that_serve_the_model() -> None:
    controller = Controller("lottery")
    controller.register_worker("http://a", True, status("m1"))
    controller.register_worker("http://b", True, status("m2", speed=5))
    assert {controller.get_worker_address("m1") for _ in range(20)} == {"http://a"}


def test_silent_workers_expire_and_heartbeats_keep_them() -> None:
    controller = Controller(heartbeat_expiration=0.4)
    controller.register_worker("http://alive", True, status("m"))
    controller.register_worker("http://silent", True, status("m"))
    controller.register_worker("http://unchecked", False, status("u"))
    for _ in range(4):
        time.sleep(0.15)
        assert controller.receive_heart_beat("http://alive", 2)
    assert controller.remove_expired_workers() == ["http://silent"]
    assert set(controller.workers()) == {"http://alive", "http://unchecked"}
    assert controller.list_models() == ["m", "u"]
    assert not controller.receive_heart_beat("http://silent", 0)  # tells it to register again
    assert controller.workers()["http://alive"].queue_length == 2


def test_sweeper_thread_removes_expired_workers() -> None:
    controller = Controller(heartbeat_expiration=0.3)
    controller.register_worker("http://w", True, status("m"))
    controller.start()
    try:
        deadline = time.monotonic() + 3
        while controller.workers() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert controller.workers() == {}
    finally:
        controller.stop()


def test_refresh_drops_unreachable_workers() -> None:
    controller = Controller(status_timeout=2)
    dead = f"http://127.0.0.1:{free_port()}"
    controller.register_worker(dead, True, status("m"))
    controller.refresh_all_workers()
    assert controller.workers() == {} and controller.list_models() == []
    assert not controller.register_worker(dead, True, None)  # no status given and none can be fetched


def test_generate_stream_without_a_worker_says_so() -> None:
    controller = Controller()
    pieces = list(controller.generate_stream({"model": "m", "prompt": "hi"}))
    assert len(pieces) == 1 and pieces[0].endswith(b"\0")
    chunk = json.loads(pieces[0][:-1])
    assert chunk["error_code"] == 2 and chunk["text"].startswith("No model is available: no running worker serves 'm'.")


def test_generate_stream_with_a_dead_worker_says_so() -> None:
    controller = Controller(stream_timeout=(2, 2))
    dead = f"http://127.0.0.1:{free_port()}"
    controller.register_worker(dead, True, status("m"))
    chunk = json.loads(list(controller.generate_stream({"model": "m"}))[0][:-1])
    assert chunk["error_code"] == 3 and dead in chunk["text"]


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown dispatch method 'random'; expected one of shortest_queue, lottery"):
        Controller("random")
    with pytest.raises(ValueError, match="heartbeat_expiration must be positive"):
        Controller(heartbeat_expiration=0)
    assert not Controller().register_worker("http://x", True, {"speed": 1})  # status without model_names


def test_defaults_bind_loopback() -> None:
    args = build_parser().parse_args([])
    assert (args.host, args.port, args.dispatch_method) == ("127.0.0.1", 21001, "shortest_queue")
    assert args.heartbeat_expiration == 30
