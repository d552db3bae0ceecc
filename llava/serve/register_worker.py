"""Register a model worker with a controller by hand (upstream's ``llava.serve.register_worker``).

    python -m llava.serve.register_worker --controller-address http://localhost:21001 \
        --worker-name http://localhost:21002 [--check-heart-beat]

A worker registers itself when it starts; this is for a worker started with ``--no-register`` or a
controller restarted after its workers. With ``--check-heart-beat`` the controller drops the worker when its
heartbeats stop, as for a self-registered worker.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # started as a file: run as ``python -m llava.serve.<name>``
    import os  # noqa: E401
    import sys
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    from llava.serve import run_as_module
    run_as_module(__file__)

import argparse
from collections.abc import Sequence

from llava import net
from llava.endpoints import join_url
from llava.utils import UserError, cli_main

from .flags import add_flag

#: Seconds, in all, for the registration (the controller asks the worker for its status meanwhile).
TIMEOUT = 30.0


def register_worker(controller_address: str, worker_name: str, check_heart_beat: bool = False) -> bool:
    """POST ``/register_worker``; returns whether the controller listed the worker (it asks the worker for its
    status itself).

    Raises:
        UserError: If the controller cannot be reached, or refuses the address (naming why).
    """
    url = join_url(controller_address, "/register_worker", "--controller-address")
    payload = {"worker_name": worker_name, "check_heart_beat": check_heart_beat}
    try:
        response = net.request("POST", url, json=payload, deadline=TIMEOUT, max_bytes=64 * 1024, max_redirects=0)
        answer = response.json()
    except net.NetError as error:
        raise UserError(f"the controller at {controller_address} cannot be reached ({error})") from None
    except ValueError:
        raise UserError(f"the controller at {controller_address} did not answer with JSON (HTTP {response.status}); "
                        "is it a LLaVA controller?") from None
    if response.status != 200:
        reason = answer.get("error") if isinstance(answer, dict) else None
        raise UserError(f"the controller at {controller_address} refused the worker: {reason or f'HTTP {response.status}'}")
    return not isinstance(answer, dict) or bool(answer.get("registered", True))


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
