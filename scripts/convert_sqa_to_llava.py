"""Convert ScienceQA (``problems.json`` + ``pid_splits.json``) into LLaVA training data (upstream's script).

    python scripts/convert_sqa_to_llava.py convert_to_llava --base-dir /path/to/ScienceQA/data/scienceqa \
        --prompt-format QCM-LEA --split train        # -> <base-dir>/llava_train_QCM-LEA.json
    python scripts/convert_sqa_to_llava.py convert_to_jsonl --base-dir ... --split train   # -> scienceqa_train_QCM-LEPA.jsonl

``convert_to_llava`` writes the training format (``{"id", "image"?, "conversations"}``; an image problem's
human turn ends with ``\\n<image>``, its image is ``<id>/<image file>``); ``convert_to_jsonl`` writes
``{"id", "image"?, "instruction", "output"}`` lines. Prompt formats: see ``convert_sqa_to_llava_base_prompt``.

The output file is checked before the conversion (a writable ``--base-dir``, not one of the two inputs) and
written atomically; a split that names a problem ``problems.json`` lacks is one sentence naming it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helper module next to this script

from convert_sqa_to_llava_base_prompt import build_prompt_chatbot  # noqa: E402

from llava.eval.files import check_fields, read_json  # noqa: E402
from llava.outputs import guard_outputs, write_json, write_text  # noqa: E402
from llava.utils import UserError, cli_main  # noqa: E402

SPLITS_FILE = "pid_splits.json"
PROBLEMS_FILE = "problems.json"
#: The fields of a ScienceQA problem the prompt is built from, with their types in the official problems.json.
PROBLEM_FIELDS = {"question": str, "hint": str, "choices": list, "answer": int, "lecture": str, "solution": str}


def _examples(base_dir: str, split: str, prompt_format: str) -> list[tuple[str, dict[str, Any], str, str]]:
    """``(id, problem, input, output)`` per problem of ``split``, upstream's prefixes stripped."""
    splits = read_json(os.path.join(base_dir, SPLITS_FILE), what="ScienceQA pid_splits.json")
    if not isinstance(splits, dict) or split not in splits:
        known = sorted(splits) if isinstance(splits, dict) else []
        raise UserError(f"unknown ScienceQA split {split!r}; pid_splits.json has {known}")
    problems = read_json(os.path.join(base_dir, PROBLEMS_FILE), what="ScienceQA problems.json")
    if not isinstance(splits[split], list) or not isinstance(problems, dict):
        raise UserError(f"{base_dir}: pid_splits.json must map split names to lists of ids and problems.json ids to problems")
    missing = [qid for qid in splits[split] if qid not in problems]
    if missing:
        raise UserError(
            f"pid_splits.json lists problem {missing[0]!r} in split {split!r}, but problems.json has no such problem "
            f"({len(missing)} of {len(splits[split])} ids are missing); use the two files of the same ScienceQA release"
        )
    for qid in splits[split]:
        check_fields(problems[qid], PROBLEM_FIELDS, f"problems.json, problem {qid!r}")
    rows = []
    for qid, (source, target) in build_prompt_chatbot(problems, splits[split], prompt_format).items():
        source = source.replace("Question: ", "", 1) if source.startswith("Question: ") else source
        target = target.replace("Answer: ", "", 1) if target.startswith("Answer: ") else target
        rows.append((qid, problems[qid], source, target))
    return rows


def _guard(base_dir: str, output: str) -> str:
    """Check, before converting, that ``output`` can be written and is neither input file; returns it."""
    inputs = {f"--base-dir's {name}": os.path.join(base_dir, name) for name in (SPLITS_FILE, PROBLEMS_FILE)}
    guard_outputs(inputs=inputs, files={"output file": output})
    return output


def convert_to_llava(base_dir: str, split: str, prompt_format: str = "QCM-LEPA") -> Path:
    output = _guard(base_dir, os.path.join(base_dir, f"llava_{split}_{prompt_format}.json"))
    records = []
    for qid, problem, source, target in _examples(base_dir, split, prompt_format):
        record: dict[str, Any] = {"id": qid}
        if problem.get("image") is not None:
            record["image"] = os.path.join(qid, problem["image"])
            source += "\n<image>"
        record["conversations"] = [{"from": "human", "value": source}, {"from": "gpt", "value": target}]
        records.append(record)
    print(f"Number of samples: {len(records)}")
    return write_json(output, records, indent=2)


def convert_to_jsonl(base_dir: str, split: str, prompt_format: str = "QCM-LEPA") -> Path:
    output = _guard(base_dir, os.path.join(base_dir, f"scienceqa_{split}_{prompt_format}.jsonl"))
    lines = []
    for qid, problem, source, target in _examples(base_dir, split, prompt_format):
        record: dict[str, Any] = {"id": qid}
        if problem.get("image") is not None:
            record["image"] = os.path.join(qid, problem["image"])
            source += "\n<image>"
        record.update(instruction=source, output=target)
        lines.append(json.dumps(record))
    return write_text(output, "".join(line + "\n" for line in lines))


TASKS = {"convert_to_llava": convert_to_llava, "convert_to_jsonl": convert_to_jsonl}


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("--base-dir", "--base_dir", dest="base_dir", required=True)
    parser.add_argument("--split", required=True, help="train, val, minival, test or minitest")
    parser.add_argument("--prompt-format", "--prompt_format", dest="prompt_format", default="QCM-LEPA")
    args = parser.parse_args(argv)
    return TASKS[args.task](args.base_dir, args.split, args.prompt_format)


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
