"""Register a model worker with a controller by hand (upstream's ``llava.serve.register_worker``).

    python -m llava.serve.register_worker --controller-address http://localhost:21001 \
        --worker-name http://localhost:21002 [--check-heart-beat]

A worker registers itself when it starts; this is for a worker started with ``--no-register`` or a
controller restarted after its workers. With ``--check-heart-beat`` the controller drops the worker when its
heartbeats stop, as for a self-registered worker.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import requests

from llava.utils import UserError, cli_main

from .flags import add_flag


def register_worker(controller_address: str, worker_name: str, check_heart_beat: bool = False) -> bool:
    """POST ``/register_worker``; returns whether the controller accepted the worker (it asks for its status).

    Raises:
        UserError: If the controller cannot be reached or answers with an error.
    """
    url = controller_address.rstrip("/") + "/register_worker"
    payload = {"worker_name": worker_name, "check_heart_beat": check_heart_beat, "worker_status": None}
    try:
        response = requests.post(url, json=payload, timeout=30)
    except requests.RequestException as error:
        raise UserError(f"the controller at {controller_address} cannot be reached ({type(error).__name__})") from None
    if response.status_code != 200:
        raise UserError(f"the controller at {controller_address} refused the worker: HTTP {response.status_code} {response.text[:200]}")
    return bool(response.json().get("registered", True))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llava.serve.register_worker", description=__doc__.splitlines()[0])
    add_flag(parser, "--controller-address", type=str, default="http://localhost:21001")
    add_flag(parser, "--worker-name", type=str, required=True, help="the worker's address, e.g. http://localhost:21002")
    add_flag(parser, "--check-heart-beat", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> bool:
    args = build_parser().parse_args(argv)
    registered = register_worker(args.controller_address, args.worker_name, args.check_heart_beat)
    if not registered:
        raise UserError(f"the controller could not get the status of {args.worker_name}; is the worker running?")
    print(f"registered {args.worker_name} with {args.controller_address}")
    return registered


__all__ = ["build_parser", "main", "register_worker"]


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
