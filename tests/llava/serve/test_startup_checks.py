"""Start-up faults of the four servers answer in one sentence before the slow part (model load, page build).

A taken ``--port``, an impossible ``--port`` or ``--host``, bad interval flags and a ``--model-path`` that is a
file: each is refused with :class:`UserError` (or argparse's exit 2) naming the flag, before any model loads;
``--help`` imports neither torch nor gradio.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from llava.serve import controller, demo, flags, gradio_web_server, model_worker
from llava.utils import UserError

from .conftest import ROOT, free_port

#: A --model-path that does not exist: a check that runs before the load answers first, anything else names it.
MISSING = "/nonexistent/llava-checkpoint"


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another program listens on (as a server left running would)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("module, argv", [
    (controller, []),
    (model_worker, ["--model-path", MISSING, "--device", "cpu", "--no-register"]),
    (gradio_web_server, ["--controller", "http://127.0.0.1:9"]),
    (demo, ["--model-path", MISSING, "--device", "cpu"]),
], ids=["controller", "model_worker", "gradio_web_server", "demo"])
def test_taken_port_is_refused_before_start(module, argv: list[str], taken_port: int) -> None:
    with pytest.raises(UserError, match=f"--port {taken_port} is already in use on 127.0.0.1"):
        module.main([*argv, "--port", str(taken_port)])


def test_port_out_of_range_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        controller.build_parser().parse_args(["--port", "99999"])
    assert exit_info.value.code == 2 and "'99999' is not a port number" in capsys.readouterr().err
    assert model_worker.build_parser().parse_args(["--port", "40000"]).port == 40000


def test_host_this_machine_cannot_listen_on() -> None:
    port = free_port()
    # 192.0.2.1 is TEST-NET-1 (RFC 5737): never an address of this machine.
    with pytest.raises(UserError, match="--host 192.0.2.1 is not an address of this machine"):
        flags.check_bind("192.0.2.1", port)
    flags.check_bind("127.0.0.1", port)  # a free port on loopback passes
    flags.check_bind("127.0.0.1", None)  # the page's default: gradio picks a port


@pytest.mark.parametrize("flag, value", [("--heartbeat-interval", "0"), ("--stream-interval", "0")])
def test_worker_interval_flags_are_checked_before_the_load(flag: str, value: str) -> None:
    with pytest.raises(UserError, match=f"^{flag} must be"):
        model_worker.main(["--model-path", MISSING, "--device", "cpu", "--port", str(free_port()), flag, value])


@pytest.mark.parametrize("flag", ["--heartbeat-expiration", "--stream-timeout"])
def test_controller_timing_flags_name_the_flag(flag: str) -> None:
    with pytest.raises(UserError, match=f"^{flag} must be a positive number of seconds, got 0.0"):
        controller.main([flag, "0", "--port", str(free_port())])


def test_model_path_that_is_a_file(tmp_path: Path) -> None:
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"not a folder")
    with pytest.raises(UserError, match="is a file; pass the checkpoint folder"):
        model_worker.main(["--model-path", str(weights), "--device", "cpu", "--no-register", "--port", str(free_port())])


@pytest.mark.parametrize("name", ["controller", "model_worker", "gradio_web_server", "demo", "cli", "test_message"])
def test_help_imports_neither_torch_nor_gradio(name: str) -> None:
    code = (f"import sys\nfrom llava.serve import {name} as command\ntry:\n    command.main(['--help'])\n"
            "except SystemExit:\n    pass\nprint('heavy imports:', sorted({'torch', 'gradio', 'transformers'} & set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "usage: python -m llava.serve." in result.stdout and "heavy imports: []" in result.stdout, result.stderr
