"""What the quickstart leaves behind and what to run on it next: checkpoint paths and copy-pasteable commands.

The trained checkpoints name their vision tower relative to themselves (:func:`tower_beside`), so every command
printed here works from any folder, and keeps working when the output folder is moved as a whole.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llava.outputs import write_json

__all__ = ["activation_hint", "next_steps", "tower_beside"]


def tower_beside(checkpoint: Path, tower: Path) -> None:
    """Store ``checkpoint``'s ``mm_vision_tower`` as the path of ``tower`` relative to the checkpoint folder.

    The loaders read a relative tower from the working directory first, then from the checkpoint's folder
    (:mod:`llava.model.multimodal_encoder.location`), so the checkpoint then loads from anywhere, and after the
    quickstart's output folder is moved or copied as a whole.
    """
    config_file = checkpoint / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["mm_vision_tower"] = os.path.relpath(tower.resolve(), checkpoint.resolve())
    write_json(config_file, config)


def activation_hint() -> str | None:
    """The command that puts this interpreter's virtualenv on ``PATH``, or ``None`` when it is already active (or
    this Python is not a virtualenv's): ``make quickstart`` runs ``.venv/bin/python`` without activating it, so
    the project's console scripts and ``python -m llava...`` are not found in the user's shell afterwards."""
    if sys.prefix == sys.base_prefix:
        return None
    active = os.environ.get("VIRTUAL_ENV")
    if active and os.path.realpath(active) == os.path.realpath(sys.prefix):
        return None
    return f"source {shlex.quote(_shown(Path(sys.prefix) / 'bin' / 'activate'))}"


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it (shorter to read), else absolute."""
    path = path.absolute()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _shell_text(text: str) -> str:
    """``text`` quoted for bash/zsh; a newline becomes ``$'...\\n...'`` so that the command stays on one line."""
    if "\n" not in text:
        return shlex.quote(text)
    return "$'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def _first_question(questions: Path, gold: Path) -> tuple[dict[str, Any], str]:
    with open(questions, encoding="utf-8") as handle:
        record = json.loads(handle.readline())
    with open(gold, encoding="utf-8") as handle:
        answers = {item["question_id"]: item["answer"] for item in map(json.loads, handle)}
    return record, str(answers.get(record["question_id"], "?"))


def next_steps(checkpoints: Sequence[tuple[str, Path]], media: Path, questions: Path, gold: Path, template: str,
               out: Path, video: bool = False) -> str:
    """The closing text: where each checkpoint is, and the commands to answer with one, chat with it and compare.

    Args:
        checkpoints: ``(projector type, stage-2 folder)`` per trained projector, the one to show commands for last.
        media: The held-out images' (or clips') folder; questions, gold: the held-out question and answer files.
        template: The backbone's conversation template (``--conv-mode``).
        out: The quickstart's output folder.
        video: Clips instead of images (the chat demo takes images, so it is not offered).
    """
    width = max(len(name) for name, _ in checkpoints)
    lines = [f"Trained checkpoints (stage 2; each loads from any folder, also after {_shown(out)} is moved as a whole):"]
    lines += [f"  {name:<{width}}  {folder.absolute()}" for name, folder in checkpoints]
    chosen = str(checkpoints[-1][1].absolute())
    record, answer = _first_question(questions, gold)
    medium = "video" if video else "image"
    clip = media / record[medium]
    hint = activation_hint()
    lines += ["", "Next" + (f" (first put the environment on PATH in this shell: {hint})" if hint else "") + ":"]
    lines += [
        f"  # answer a held-out question with {checkpoints[-1][0]} (expected answer: {answer})",
        f"  python -m llava.eval.run_llava --model-path {shlex.quote(chosen)} --{medium}-file {shlex.quote(str(clip.absolute()))} "
        f"--query {_shell_text(record['text'])} --conv-mode {template} --temperature 0 --max_new_tokens 8 --device cpu",
    ]
    if not video:
        lines += ["  # chat with it in the browser (http://127.0.0.1:7860)",
                  f"  python -m llava.serve.demo --model-path {shlex.quote(chosen)} --conv-mode {template} --device cpu"]
        lines += ["  # compare every installed compressor at 16 tokens, and every in-LLM reducer, on the same recipe",
                  "  python -m llava.quickstart --reduced --projectors all --budget 16 --reducers all --out outputs/all16"]
    return "\n".join(lines)
