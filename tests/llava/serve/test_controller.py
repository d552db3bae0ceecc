"""The controller's registry in-process, with stand-in workers on 127.0.0.1 (the controller fetches every status
itself): dispatch, heartbeat expiry, refresh, and answers when no worker serves."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack

import pytest

from llava.serve.controller import Controller, build_parser

from .conftest import free_port
from .fake_worker import fake_worker, status


def _workers(stack: ExitStack, *statuses: dict) -> list[str]:
    return [stack.enter_context(fake_worker(item)).url for item in statuses]


def test_register_list_and_shortest_queue_dispatch() -> None:
    controller = Controller("shortest_queue")
    with ExitStack() as stack:
        a, b = _workers(stack, status("m1", queue_length=3), status("m1", "m2", queue_length=1))
        assert controller.register_worker(a, True) and controller.register_worker(b, True)
        assert controller.list_models() == ["m1", "m2"]
        assert controller.get_worker_address("m2") == b
        picks = [controller.get_worker_address("m1") for _ in range(4)]
        assert picks == [b, a, b, a]  # each pick counts until the next heartbeat
        assert controller.get_worker_address("unknown") == ""


def test_lottery_picks_only_workers_that_serve_the_model() -> None:
    controller = Controller("lottery")
    with ExitStack() as stack:
        a, b = _workers(stack, status("m1"), status("m2", speed=5))
        controller.register_worker(a, True)
        controller.register_worker(b, True)
        assert {controller.get_worker_address("m1") for _ in range(20)} == {a}


def test_silent_workers_expire_and_heartbeats_keep_them() -> None:
    controller = Controller(heartbeat_expiration=0.4)
    with ExitStack() as stack:
        alive, silent, unchecked = _workers(stack, status("m"), status("m"), status("u"))
        controller.register_worker(alive, True)
        controller.register_worker(silent, True)
        controller.register_worker(unchecked, False)
        for _ in range(4):
            time.sleep(0.15)
            assert controller.receive_heart_beat(alive, 2)
        assert controller.remove_expired_workers() == [silent]
        assert set(controller.workers()) == {alive, unchecked}
        assert controller.list_models() == ["m", "u"]
        assert not controller.receive_heart_beat(silent, 0)  # tells it to register again
        assert controller.workers()[alive].queue_length == 2
        assert controller.receive_heart_beat(alive + "/", 1)  # the same worker, spelled with a trailing slash


def test_sweeper_thread_removes_expired_workers() -> None:
    controller = Controller(heartbeat_expiration=0.3)
    with fake_worker(status("m")) as worker:
        controller.register_worker(worker.url, True)
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
    with fake_worker(status("m")) as worker:
        controller.register_worker(worker.url, True)
        assert controller.list_models() == ["m"]
    controller.refresh_all_workers()  # the worker has stopped
    assert controller.workers() == {} and controller.list_models() == []
    assert not controller.register_worker(f"http://127.0.0.1:{free_port()}", True)  # nothing answers there


def test_generate_stream_without_a_worker_says_so() -> None:
    controller = Controller()
    pieces = list(controller.generate_stream({"model": "m", "prompt": "hi"}))
    assert len(pieces) == 1 and pieces[0].endswith(b"\0")
    chunk = json.loads(pieces[0][:-1])
    assert chunk["error_code"] == 2 and chunk["text"].startswith("No model is available: no running worker serves 'm'.")


def test_generate_stream_relays_and_a_dead_worker_is_named() -> None:
    controller = Controller(stream_timeout=2)
    with fake_worker(status("m")) as worker:
        controller.register_worker(worker.url, True)
        assert list(controller.generate_stream({"model": "m", "prompt": "hi"})) == [b'{"text": "hi ok", "error_code": 0}\0']
    chunk = json.loads(list(controller.generate_stream({"model": "m"}))[0][:-1])
    assert chunk["error_code"] == 3 and worker.url in chunk["text"]


def test_bad_settings_and_statuses_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown dispatch method 'random'; expected one of shortest_queue, lottery"):
        Controller("random")
    with pytest.raises(ValueError, match=r"heartbeat_expiration \(--heartbeat-expiration\) must be a finite number above 0"):
        Controller(heartbeat_expiration=0)
    for bad in ({"speed": 1}, {"model_names": []}, {"model_names": ["m"], "speed": "fast"}, ["m"],
                {"model_names": ["m"], "queue_length": -1}):
        with fake_worker(bad) as worker:
            assert not Controller().register_worker(worker.url, True), bad


def test_defaults_bind_loopback() -> None:
    args = build_parser().parse_args([])
    assert (args.host, args.port, args.dispatch_method) == ("127.0.0.1", 21001, "shortest_queue")
    assert args.heartbeat_expiration == 30 and args.allowed_worker_hosts == [] and args.stream_timeout == 600
    assert (args.limit_concurrency, args.timeout_keep_alive, args.body_timeout) == (256, 5, 60)
