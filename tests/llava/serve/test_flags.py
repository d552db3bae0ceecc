"""Upstream-style launch commands parse, and every server binds 127.0.0.1 unless told otherwise."""

from __future__ import annotations

from llava.serve import controller, demo, gradio_web_server, model_worker


def test_upstream_readme_commands_parse() -> None:
    args = controller.build_parser().parse_args(["--host", "0.0.0.0", "--port", "10000"])
    assert (args.host, args.port) == ("0.0.0.0", 10000)
    args = model_worker.build_parser().parse_args(
        ["--host", "0.0.0.0", "--controller", "http://localhost:10000", "--port", "40000", "--worker",
         "http://localhost:40000", "--model-path", "liuhaotian/llava-v1.5-13b", "--load-4bit"]
    )
    assert (args.controller_address, args.worker_address, args.port, args.load_4bit) == (
        "http://localhost:10000", "http://localhost:40000", 40000, True)
    args = model_worker.build_parser().parse_args(
        ["--controller-address", "http://c:1", "--worker-address", "http://w:2", "--model-base", "b",
         "--model-name", "n", "--limit-model-concurrency", "3", "--stream-interval", "2", "--no-register",
         "--load-8bit", "--use-flash-attn", "--multi-modal", "--device", "cpu", "--max_upload_mb", "5"]
    )
    assert (args.model_base, args.model_name, args.limit_model_concurrency, args.stream_interval) == ("b", "n", 3, 2)
    assert args.no_register and args.load_8bit and args.use_flash_attn and args.max_upload_mb == 5
    args = gradio_web_server.build_parser().parse_args(
        ["--controller", "http://localhost:10000", "--model-list-mode", "reload", "--share", "--embed", "--moderate",
         "--concurrency-count", "8"]
    )
    assert (args.controller_url, args.model_list_mode, args.share, args.embed, args.concurrency_count) == (
        "http://localhost:10000", "reload", True, True, 8)


def test_servers_bind_loopback_by_default() -> None:
    assert controller.build_parser().parse_args([]).host == "127.0.0.1"
    worker = model_worker.build_parser().parse_args([])
    assert worker.host == "127.0.0.1" and worker.worker_address is None
    assert model_worker.default_worker_address("127.0.0.1", 40000) == "http://localhost:40000"
    assert model_worker.default_worker_address("10.0.0.5", 40000) == "http://10.0.0.5:40000"
    assert gradio_web_server.build_parser().parse_args([]).host == "127.0.0.1"
    assert demo.build_parser().parse_args(["--model-path", "x"]).host == "127.0.0.1"
