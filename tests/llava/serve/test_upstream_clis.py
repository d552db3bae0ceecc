"""Upstream's serving helpers against the running stack: ``register_worker`` and ``test_message``."""

from __future__ import annotations

import pytest
import requests

from llava.serve import register_worker, test_message

from .conftest import ServingStack


def test_register_worker_re_registers_a_running_worker(serving_stack: ServingStack, capsys) -> None:
    controller = serving_stack.controller_url
    assert register_worker.main(["--controller-address", controller, "--worker-name", serving_stack.worker_url,
                                 "--check-heart-beat"])
    assert f"registered {serving_stack.worker_url}" in capsys.readouterr().out
    address = requests.post(controller + "/get_worker_address", json={"model": serving_stack.model_name}, timeout=10).json()
    assert address["address"] == serving_stack.worker_url
    with pytest.raises(ValueError, match="cannot be reached"):
        register_worker.main(["--controller-address", "http://127.0.0.1:9", "--worker-name", "http://x"])


def test_test_message_streams_an_answer(serving_stack: ServingStack, capsys) -> None:
    answer = test_message.main(["--controller-address", serving_stack.controller_url, "--model-name",
                                serving_stack.model_name, "--max-new-tokens", "8", "--message", "Hello?"])
    printed = capsys.readouterr().out
    assert f"Models: ['{serving_stack.model_name}']" in printed and serving_stack.worker_url in printed
    assert isinstance(answer, str) and answer in printed
    with pytest.raises(ValueError, match="no worker serves 'other-model'"):
        test_message.main(["--controller-address", serving_stack.controller_url, "--model-name", "other-model"])
