"""Every command line uses the one shared helper of each rule (issue 22): the output guard (``llava.outputs``), the
network client (``llava.net``), the up-front check of generation values (``llava.generation``) and the device
choice (``llava.devices.resolve_device``).

The commands are found in the tree and read with ``ast`` (see ``tests/cli_rules.py``); nothing is imported, so this
runs in about two seconds. A synthetic tree that breaks each rule shows that the checker can fail.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from .cli_rules import Checker, Project, commands

#: (module, function) -> why a write there needs no up-front check; ``"*"``: every function of the module.
WRITE_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("llava.utils", "build_logger"):
        "creates the servers' log folder (upstream's LOGDIR) for rotating log files; logs, never a user's results",
    ("llava.video", "write_video"):
        "encodes synthetic clips to the path its caller gives: the tests' tmp_path and the quickstart's data folder, "
        "which the quickstart checks with check_output_folder first",
    ("llava.testing.tiny", "*"): "test fixtures: tiny checkpoints built into the folder the caller gives",
    ("llava.testing.tiny_towers", "*"): "test fixtures: tiny vision towers built into the folder the caller gives",
    ("llava.testing.tiny_tokenizers", "*"): "test fixtures: tokenizers trained into the folder the caller gives",
    ("scripts/next/parity/video_ours.py", "*"):
        "a developer's parity script (docs: NeXT video parity) that builds its scratch folder, named on its command "
        "line, and reuses it as a cache between runs",
}


@pytest.fixture(scope="module")
def project() -> Project:
    return Project()


def test_the_commands_are_found_in_the_tree(project: Project) -> None:
    found = commands(project)
    # One of each way a command is declared: __main__ block, __main__.py, console_scripts, scripts/**/*.py.
    for expected in ("llava.eval.model_vqa_loader", "llava.quickstart.__main__", "braco_patch.cli",
                     "scripts/merge_lora_weights.py", "scripts/next/parity/video_next.py", "examples/infer.py",
                     "llava.serve.controller", "llava.train.train"):
        assert expected in found
    assert len(found) >= 45
    # braco's dispatcher reaches its subcommands through importlib with names from a table
    assert {"braco_patch.demo", "braco_patch.cost.cli", "braco_patch.diagnose"} <= project.modules["braco_patch.cli"].imports


def test_every_command_uses_the_shared_helpers(project: Project) -> None:
    assert Checker(project, WRITE_EXCEPTIONS).violations() == []


def test_every_exception_is_still_needed(project: Project) -> None:
    """An exception whose writes are gone must go too (the list stays short and true)."""
    checker = Checker(project)
    for (module, function), reason in WRITE_EXCEPTIONS.items():
        assert module in project.modules, f"stale exception ({reason}): {module}"
        writes = checker.facts(module).writes
        assert any(function in ("*", site.function) for site in writes), f"stale exception ({reason}): {module}.{function}"


# ---------------------------------------------------------------------- the checker can fail

#: A stand-in for the real helpers: only names and import paths matter to the checker.
HELPERS = {
    "llava/__init__.py": "",
    "llava/outputs.py": """
        def guard_outputs(**kw): pass
        def check_output_folder(path, flag): pass
        def atomic_output(path, mode="w"): pass
        def write_json(path, payload): pass
        def set_aside(path, keep, damaged): pass
    """,
    "llava/devices.py": "def resolve_device(name): return name\n",
    "llava/generation.py": """
        from llava.devices import resolve_device
        class GenerationConfig: pass
        def check_generation_values(*values): pass
    """,
    "llava/net.py": "import http.client\nimport urllib.request\n",
    "llava/saving.py": "import torch\ndef save(model, folder):\n    torch.save(model, folder + '/model.bin')\n",
}

BREACHES = {
    # rule 1: a bare open for writing, and no up-front check
    "llava/bare.py": """
        import json
        def main(path):
            with open(path, "w") as handle:
                json.dump({}, handle)
        if __name__ == "__main__":
            main("x")
    """,
    # rule 1: a raw write two imports away, and no check on the way
    "llava/exporter.py": """
        def main(folder):
            from llava import saving
            saving.save({}, folder)
        if __name__ == "__main__":
            main("x")
    """,
    # rule 1: appending without the resume helpers
    "llava/appender.py": """
        from pathlib import Path
        from llava.outputs import guard_outputs
        def main(path):
            guard_outputs(files={"--out": path})
            with Path(path).open("a") as handle:
                handle.write("x")
        if __name__ == "__main__":
            main("x")
    """,
    # rule 2: HTTP outside llava/net.py, imported plainly and through importlib
    "llava/fetcher.py": """
        import importlib
        def get(url):
            import requests
            return requests.get(url), importlib.import_module("urllib.request")
    """,
    # rule 3: decoding flags never checked; and a check after the model loads
    "llava/unchecked.py": """
        import argparse
        def main():
            parser = argparse.ArgumentParser()
            parser.add_argument("--temperature", type=float)
            parser.add_argument("--max-new-tokens", type=int)
            return parser.parse_args()
        if __name__ == "__main__":
            main()
    """,
    "llava/late.py": """
        import argparse
        from llava.generation import GenerationConfig
        from llava.model import load_pretrained_model
        def main():
            parser = argparse.ArgumentParser()
            parser.add_argument("--num_beams", type=int)
            args = parser.parse_args()
            model = load_pretrained_model(args)
            config = GenerationConfig(args.num_beams)
        if __name__ == "__main__":
            main()
    """,
    # rule 4: --device used as given
    "scripts/raw_device.py": """
        import argparse, torch
        parser = argparse.ArgumentParser()
        parser.add_argument("--device", default="cuda")
        torch.zeros(1, device=parser.parse_args().device)
    """,
    # a dispatcher that reaches a breaking command through importlib with a computed name
    "braco_patch/__init__.py": "",
    "braco_patch/dispatch.py": """
        import importlib, sys
        COMMANDS = {"export": "llava.exporter"}
        def main():
            importlib.import_module(COMMANDS[sys.argv[1]]).main("x")
    """,
}

GOOD = {
    # guarded raw writes, atomic writes, resumed appends, checked flags, resolved devices
    "llava/good_writer.py": """
        import json, torch
        from llava import outputs
        from llava.outputs import atomic_output
        def main(path, folder):
            outputs.guard_outputs(files={"--out": path}, folders={"--dir": folder})
            with atomic_output(path) as handle:
                json.dump({}, handle)
            torch.save({}, folder + "/x.bin")
        if __name__ == "__main__":
            main("a", "b")
    """,
    "llava/good_resume.py": """
        from llava.outputs import check_output_folder, set_aside
        def main(path):
            check_output_folder(path, "--out")
            set_aside(path, [], [])
            with open(path, "a") as handle:
                handle.write("x")
        if __name__ == "__main__":
            main("a")
    """,
    "llava/good_generate.py": """
        import argparse
        from llava.generation import GenerationConfig, resolve_device
        from llava.model import load_pretrained_model
        def main():
            parser = argparse.ArgumentParser()
            parser.add_argument("--top_p", type=float)
            parser.add_argument("--device")
            args = parser.parse_args()
            config = GenerationConfig(args.top_p)
            device = resolve_device(args.device)
            return load_pretrained_model(args, device), config
        if __name__ == "__main__":
            main()
    """,
    "setup.py": 'setup(entry_points={"console_scripts": ["dispatch = braco_patch.dispatch:main"]})\n',
}


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")


@pytest.fixture()
def synthetic(tmp_path: Path) -> list[str]:
    _tree(tmp_path, {**HELPERS, **BREACHES, **GOOD})
    return Checker(Project(tmp_path)).violations()


def test_the_synthetic_commands_are_found(tmp_path: Path) -> None:
    _tree(tmp_path, {**HELPERS, **BREACHES, **GOOD})
    assert commands(Project(tmp_path)) == [
        "braco_patch.dispatch",  # from setup.py's console_scripts only
        "llava.appender", "llava.bare", "llava.exporter", "llava.good_generate", "llava.good_resume",
        "llava.good_writer", "llava.late", "llava.unchecked", "scripts/raw_device.py"]


def test_each_breach_is_named(synthetic: list[str]) -> None:
    def hits(*fragments: str) -> list[str]:
        return [line for line in synthetic if all(fragment in line for fragment in fragments)]

    assert hits("outputs: llava/bare.py:3 open:w in main() opens a file for writing itself")
    assert hits("outputs: llava.bare writes (llava/bare.py:3", "never calls an up-front check")
    assert hits("outputs: llava.exporter reaches a write", "(llava.exporter -> llava.saving)",
                "llava/saving.py:3 torch.save in save()")
    assert hits("outputs: llava/appender.py:5 open:a in main() appends without llava.outputs' resume helpers")
    assert hits("network: llava/fetcher.py:3 imports requests")
    assert hits("network: llava/fetcher.py:4 imports urllib.request")
    assert hits("generation: llava.unchecked takes --max-new-tokens, --temperature but never builds")
    assert hits("generation: llava/late.py:8 llava.model.load_pretrained_model in main() loads a model before", "(line 9)")
    assert hits("devices: scripts/raw_device.py takes --device but never calls llava.devices.resolve_device")
    assert hits("outputs: braco_patch.dispatch reaches a write", "(braco_patch.dispatch -> llava.exporter -> llava.saving)")


def test_the_helpers_and_their_proper_use_pass(synthetic: list[str]) -> None:
    for clean in ("good_writer", "good_resume", "good_generate", "llava/net.py"):
        assert not [line for line in synthetic if clean in line], clean
    assert len(synthetic) == 14, "\n".join(synthetic)  # the breaches above, some named twice (both rule halves)


# ---------------------------------------------------------------------- what the checker found, held by behaviour


def test_braco_demo_refuses_a_folder_it_did_not_write(tmp_path: Path) -> None:
    from braco_patch import demo

    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    with pytest.raises(SystemExit) as caught:
        demo.main(["--image-size", "56", "--budgets", "4", "--out", str(foreign)])
    assert caught.value.code == 2
    assert sorted(p.name for p in foreign.iterdir()) == ["keep.txt"]
    demo.main(["--image-size", "56", "--budgets", "4", "--out", str(tmp_path / "new")])
    demo.main(["--image-size", "56", "--budgets", "4", "--out", str(tmp_path / "new")])  # its own folder: replaced
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == [".llava-output", "demo.json", "demo.png"]


def test_braco_diagnostics_check_device_and_out_before_the_tower(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from braco_patch.diagnostics.commands import calibrate_main, diagnose_main

    missing = str(tmp_path / "no-tower")  # never reached: the flags are refused first
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit) as caught:
            diagnose_main(["energy", "--vision-tower", missing, "--images", str(tmp_path), "--device", "cuda"])
        assert caught.value.code == 2 and "--device cuda needs a GPU" in capsys.readouterr().err
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as caught:
        calibrate_main(["--vision-tower", missing, "--images", str(tmp_path / "out"), "--out", str(tmp_path / "out")])
    assert caught.value.code == 2 and "--out" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["notes.txt"]


def test_test_message_checks_max_new_tokens_before_any_request() -> None:
    from llava.serve import test_message
    from llava.utils import UserError

    # port 9 (discard) is closed on 127.0.0.1: a request would fail with another sentence
    with pytest.raises(UserError, match=r"^--max_new_tokens must be an integer >= 1, got 0$"):
        test_message.main(["--max-new-tokens", "0", "--controller-address", "http://127.0.0.1:9"])
