"""Send one text message to a model through the controller and stream the answer (upstream's
``llava.serve.test_message``): a smoke test of a running controller + worker.

    python -m llava.serve.test_message --model-name llava-v1.5-7b [--controller-address http://localhost:21001]
        [--worker-address URL] [--max-new-tokens 32] [--message "Tell me a story with more than 1000 words."]

Without ``--worker-address`` the controller is asked for the models it knows and the address of a worker
serving ``--model-name``. The prompt is the default conversation template with one user turn; sampling at
temperature 0.7, stopping at the template's separator.
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
from llava.conversation import SeparatorStyle, default_conversation
from llava.endpoints import join_url
from llava.utils import UserError, cli_main

from .flags import add_flag
from .protocol import CHUNK_DELIMITER, decode_chunks

#: Seconds, in all, for one call to the controller and for the whole streamed answer.
CALL_TIMEOUT, STREAM_TIMEOUT = 30.0, 600.0


def _ask(base: str, path: str, payload: dict | None = None) -> dict:
    url = join_url(base, path, "--controller-address")
    response = net.request("POST", url, json=payload, deadline=CALL_TIMEOUT, max_bytes=1024 * 1024, max_redirects=0)
    data = response.json()
    if response.status != 200 or not isinstance(data, dict):
        raise ValueError(f"HTTP {response.status} from {url}")
    return data


def worker_for(controller_address: str, model_name: str) -> str:
    """The address of a worker serving ``model_name`` (refreshing the controller's list first).

    Raises:
        UserError: If the controller is unreachable or no worker serves the model.
    """
    base = controller_address.rstrip("/")
    try:
        _ask(base, "/refresh_all_workers")
        models = sorted(_ask(base, "/list_models")["models"])
        print(f"Models: {models}")
        address = _ask(base, "/get_worker_address", {"model": model_name})["address"]
    except (net.NetError, ValueError, KeyError) as error:
        raise UserError(f"the controller at {controller_address} cannot be used ({error})") from None
    if not address:
        raise UserError(f"no worker serves {model_name!r}; the controller knows {models or 'no models'}")
    print(f"worker_addr: {address}")
    return address


def send_message(worker_address: str, model_name: str, message: str, max_new_tokens: int = 32) -> str:
    """Stream the answer to ``message`` from ``worker_address``, printing it as it grows; returns the answer."""
    conv = default_conversation.copy()
    conv.append_message(conv.roles[0], message)
    conv.append_message(conv.roles[1], None)
    prompt = conv.get_prompt()
    stop = conv.sep if conv.sep_style in (SeparatorStyle.SINGLE, SeparatorStyle.MPT) else conv.sep2
    payload = {"model": model_name, "prompt": prompt, "max_new_tokens": max_new_tokens, "temperature": 0.7, "stop": stop}
    answer = ""
    try:
        with net.open_stream("POST", worker_address.rstrip("/") + "/worker_generate_stream", json=payload,
                             deadline=STREAM_TIMEOUT) as response:
            print(prompt, end="")
            for chunk in decode_chunks(response.pieces(CHUNK_DELIMITER, 64 * 1024 * 1024)):
                if not chunk.ok:
                    raise UserError(f"the worker refused the message: {chunk.text}")
                answer = chunk.text[len(prompt):]
                print(answer, end="\r")
    except net.NetError as error:
        raise UserError(f"the worker at {worker_address} cannot be used ({error})") from None
    print("")
    return answer


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llava.serve.test_message", description=__doc__.split("\n\n")[0])
    add_flag(parser, "--controller-address", type=str, default="http://localhost:21001")
    add_flag(parser, "--worker-address", type=str, default=None)
    add_flag(parser, "--model-name", type=str, default="facebook/opt-350m")
    add_flag(parser, "--max-new-tokens", type=int, default=32)
    add_flag(parser, "--message", type=str, default="Tell me a story with more than 1000 words.")
    return parser


def main(argv: Sequence[str] | None = None) -> str:
    args = build_parser().parse_args(argv)
    from llava.generation import check_generation_values  # torch: not for --help

    check_generation_values(0.7, None, 1, args.max_new_tokens)  # before asking the controller: --max-new-tokens 0 is one sentence
    address = args.worker_address or worker_for(args.controller_address, args.model_name)
    return send_message(address, args.model_name, args.message, args.max_new_tokens)


__all__ = ["build_parser", "main", "send_message", "worker_for"]


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
