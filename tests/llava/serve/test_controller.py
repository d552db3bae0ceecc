"""The controller's registry in-process, with stand-in workers on 127.0.0.1 (the controller fetches every status
itself): dispatch, heartbeat expiry, refresh, and answers when no worker serves."""

from __future__ import annotations

import json
import logging
import time
from contextlib import ExitStack

import pytest

from llava import net
from llava.serve.admission import AllowedHosts, WorkerRefused, worker_identity, worker_origin
from llava.serve.controller import Controller, allowed_hosts, build_parser, create_app

from ..http_server import scripted_server
from .conftest import free_port, serve_in_thread
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


# ---------------------------------------------------------------------------------------------- S07, S10 (2026-11-26)


def test_s07_one_worker_is_one_entry_whatever_its_address_is_spelled() -> None:
    # Before: 1016 loopback spellings of one stand-in worker were 1016 entries, its speed counted 1016 times and the
    # lottery weighted it 1016x; the real worker was listed as both 127.0.0.1 and localhost.
    with scripted_server(lambda handled: handled.reply(200, json.dumps(status("m", speed=2)).encode()), host="0.0.0.0") as worker:
        controller = Controller("lottery")
        port = worker.port
        for spelling in (f"http://127.0.0.1:{port}", f"http://localhost:{port}", f"http://127.0.3.9:{port}/",
                         f"http://LOCALHOST:{port}", f"http://127.0.0.1:{port}"):
            assert controller.register_worker(spelling, False)
        assert list(controller.workers()) == [f"http://127.0.0.1:{port}"]  # the newest spelling replaced the others
        assert controller.aggregate_status()["speed"] == 2.0
        assert controller.receive_heart_beat(f"http://localhost:{port}", 4)  # a heartbeat under an alias finds it
        assert controller.workers()[f"http://127.0.0.1:{port}"].queue_length == 4


def test_s07_worker_identity_normalises_address_and_port() -> None:
    same = [("http://127.0.0.1:80", "http://localhost", "http://127.9.9.9:80/", "http://[::1]:80"),
            ("https://gpu-node-1", "https://GPU-NODE-1.:443"), ("http://10.0.0.5:8", "http://[::ffff:10.0.0.5]:8")]
    for spellings in same:
        assert len({worker_identity(spelling) for spelling in spellings}) == 1, spellings
    assert worker_identity("http://10.0.0.5:8") != worker_identity("http://10.0.0.5:9")
    assert worker_identity("http://localhost:8") == ("loopback", 8)


def test_s07_the_registry_is_bounded_and_says_so() -> None:
    controller = Controller(max_workers=2)
    with ExitStack() as stack:
        a, b, c = _workers(stack, status("m"), status("m"), status("m"))
        assert controller.register_worker(a, True) and controller.register_worker(b, True)
        with pytest.raises(WorkerRefused, match=r"already lists 2 workers, as many as it accepts \(--max-workers 2\)") as refused:
            controller.register_worker(c, True)
        assert refused.value.status == 503 and set(controller.workers()) == {a, b}
        assert controller.register_worker(a.replace("127.0.0.1", "localhost"), True)  # a known worker: no new entry
        with serve_in_thread(create_app(controller)) as url:
            answer = _post(url + "/register_worker", {"worker_name": c})
        assert answer.status == 503 and "--max-workers" in answer.json()["error"]
    with pytest.raises(ValueError, match="max_workers must be a positive integer"):
        Controller(max_workers=0)


def test_s07_workers_without_heartbeats_expire_when_they_stop_answering() -> None:
    # Before: an entry registered with check_heart_beat false stayed listed for ever.
    controller = Controller(heartbeat_expiration=0.3, status_timeout=2)
    with ExitStack() as stack:
        [alive] = _workers(stack, status("a"))
        controller.register_worker(alive, False)
        with fake_worker(status("b")) as worker:
            stopping = worker.url
            controller.register_worker(stopping, False)
            time.sleep(0.4)
            assert controller.recheck_silent_workers() == []  # both answer: kept, and their status refreshed
        time.sleep(0.4)
        assert controller.recheck_silent_workers() == [stopping]
        assert list(controller.workers()) == [alive] and controller.list_models() == ["a"]


def test_s10_an_entry_matching_every_address_is_warned_like_a_star(caplog) -> None:
    # Before: '0.0.0.0/0' admitted every host, 169.254.169.254 included, and was logged as an ordinary entry.
    for entries in (["0.0.0.0/0"], ["::/0", "gpu-node-1"], ["*"]):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            hosts = allowed_hosts(entries)
        assert hosts.match_all and "admits every address" in caplog.text, entries
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert not allowed_hosts(["10.0.0.0/8", "gpu-node-1"]).match_all
    assert caplog.text == ""


@pytest.mark.parametrize("entries", [["*"], ["0.0.0.0/0"], ["169.0.0.0/8"], ["::/0"]])
def test_s10_link_local_and_metadata_addresses_only_when_named(entries) -> None:
    hosts = AllowedHosts.parse(entries)
    for host in ("169.254.169.254", "169.254.1.1", "fe80::1", "fd00:ec2::254", "100.100.100.200", "::ffff:169.254.169.254",
                 "metadata.google.internal"):
        assert not hosts.allows(host), (entries, host)
    with pytest.raises(WorkerRefused, match="a link-local or metadata address is admitted only when an entry names it") as refused:
        worker_origin("http://169.254.169.254", hosts)
    assert refused.value.status == 403
    named = AllowedHosts.parse([*entries, "169.254.169.254", "fe80::/10", "metadata.google.internal"])
    assert named.allows("169.254.169.254") and named.allows("fe80::1") and named.allows("metadata.google.internal")
    assert not named.allows("169.254.1.1")


def _post(url: str, payload: dict) -> net.Response:
    return net.request("POST", url, json=payload, deadline=10, max_bytes=1 << 20)
