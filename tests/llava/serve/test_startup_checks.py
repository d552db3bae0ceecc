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


@pytest.mark.parametrize("flag, value", [("--heartbeat-interval", "0"), ("--heartbeat-interval", "inf"), ("--stream-interval", "0"),
                                         ("--max-pending-mb", "nan"), ("--max-image-megapixels", "inf"), ("--body-timeout", "1e300")])
def test_worker_numeric_flags_are_checked_before_the_load(flag: str, value: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        model_worker.main(["--model-path", MISSING, "--device", "cpu", "--port", str(free_port()), flag, value])
    assert exit_info.value.code == 2 and f"argument {flag}" in capsys.readouterr().err


# S14, S15 (issue 31): "> 0" let inf through; the controller then failed at every relay (time_t overflow) or in its
# sweeper thread. Every value that is not a finite number of seconds up to a week is refused before it starts.
@pytest.mark.parametrize("flag", ["--heartbeat-expiration", "--stream-timeout"])
@pytest.mark.parametrize("value", ["0", "inf", "nan", "-5", "1e9"])
def test_controller_timing_flags_name_the_flag(flag: str, value: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        controller.main([flag, value, "--port", str(free_port())])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_info.value.code == 2
    assert err.endswith(f"argument {flag}/{flag.replace('-', '_').replace('__', '--')}: expected a finite number above 0 "
                        f"and at most 604800 (seconds), got '{value}'")


def test_a_controller_built_in_code_checks_its_timeouts_too() -> None:
    from llava.serve.controller import Controller

    for keyword in ("heartbeat_expiration", "stream_timeout"):
        with pytest.raises(UserError, match=rf"^{keyword} \(--[a-z-]+\) must be a finite number above 0"):
            Controller(**{keyword: float("inf")})


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
