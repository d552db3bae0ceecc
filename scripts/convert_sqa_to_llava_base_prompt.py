"""ScienceQA prompt pieces for ``convert_sqa_to_llava.py`` (upstream's helper module and function names).

A prompt format is ``<input>-<output>``. Input letters, in order: Q question, C context (the hint, plus the
caption when asked), M the options ``(A) x (B) y``, and L/E (lecture/solution) given after ``BECAUSE:`` —
``QCM``, ``CQM``, ``QCML``, ``QCME``, ``QCMLE``, ``QCLM``, ``QCEM``, ``QCLEM``. Output formats: ``A``,
``AL``, ``AE``, ``ALE``, ``AEL``, ``LA``, ``EA``, ``LEA``, ``ELA`` (answer sentence plus lecture/solution in
that order; as upstream, ``AL`` carries the solution and ``AE`` the lecture) and ``LEPA`` (``LECTURE:`` /
``SOLUTION:`` lines, ``###``, ``ANSWER: X.``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

OPTIONS = ("A", "B", "C", "D", "E")
INPUT_FORMATS = ("CQM", "QCM", "QCML", "QCME", "QCMLE", "QCLM", "QCEM", "QCLEM")
# Output format -> (pieces before "The answer is X.", pieces after it behind "BECAUSE:").
_OUTPUTS: dict[str, tuple[str, str]] = {
    "A": ("", ""), "AL": ("", "E"), "AE": ("", "L"), "ALE": ("", "LE"), "AEL": ("", "EL"),
    "LA": ("L", ""), "EA": ("E", ""), "LEA": ("LE", ""), "ELA": ("EL", ""),
}


def get_question_text(problem: Mapping[str, Any]) -> str:
    return problem["question"]


def get_context_text(problem: Mapping[str, Any], use_caption: bool) -> str:
    """The hint (and the caption when ``use_caption``), or ``N/A`` when both are empty."""
    text = " ".join([problem["hint"], problem.get("caption", "") if use_caption else ""]).strip()
    return text or "N/A"


def get_choice_text(problem: Mapping[str, Any], options: Sequence[str]) -> str:
    return " ".join(f"({options[index]}) {choice}" for index, choice in enumerate(problem["choices"]))


def get_answer(problem: Mapping[str, Any], options: Sequence[str]) -> str:
    return options[problem["answer"]]


def get_lecture_text(problem: Mapping[str, Any]) -> str:
    return problem["lecture"]


def get_solution_text(problem: Mapping[str, Any]) -> str:
    return problem["solution"]


def _tidy(text: str) -> str:
    text = text.replace("  ", " ").strip()
    return text[: -len("BECAUSE:")].strip() if text.endswith("BECAUSE:") else text


def create_one_example_chatbot(
    format: str, question: str, context: str, choice: str, answer: str, lecture: str, solution: str, test_example: bool = True
) -> tuple[str, str]:
    """``(input, output)`` texts of one problem in ``format`` (e.g. ``"QCM-LEA"``).

    Raises:
        ValueError: For an unknown input or output format.
    """
    input_format, _, output_format = format.partition("-")
    if input_format not in INPUT_FORMATS or (output_format not in _OUTPUTS and output_format != "LEPA"):
        outputs = ", ".join([*_OUTPUTS, "LEPA"])
        raise ValueError(f"unknown prompt format {format!r}; expected <{'|'.join(INPUT_FORMATS)}>-<{outputs.replace(', ', '|')}>")
    pieces = {"L": lecture, "E": solution}
    lines, reasons = [], []
    for letter in input_format:
        if letter in pieces:
            reasons.append(pieces[letter])
            continue
        if reasons:  # the BECAUSE line goes where the lecture/solution letters stood
            lines.append("BECAUSE: " + " ".join(reasons))
            reasons = []
        lines.append({"Q": f"Question: {question}", "C": f"Context: {context}", "M": f"Options: {choice}"}[letter])
    if reasons:
        lines.append("BECAUSE: " + " ".join(reasons))
    source = "\n".join(lines) + "\n"
    if test_example:
        target = "Answer:"
    elif output_format == "LEPA":
        target = "".join(f"{name}: {text}\n" for name, text in (("LECTURE", lecture), ("SOLUTION", solution)) if text.strip())
        target += f"###\nANSWER: {answer}."
    else:
        before, after = _OUTPUTS[output_format]
        target = "Answer: " + "".join(pieces[letter] + " " for letter in before) + f"The answer is {answer}."
        if after:
            target += " BECAUSE: " + " ".join(pieces[letter] for letter in after)
    return _tidy(source), _tidy(target)


def build_prompt_chatbot(
    problems: Mapping[str, Mapping[str, Any]], shot_qids: Sequence[str], prompt_format: str, use_caption: bool = False,
    options: Sequence[str] = OPTIONS, is_test: bool = False,
) -> dict[str, tuple[str, str]]:
    """``{problem id: (input, output)}`` for every id of ``shot_qids``."""
    examples = {}
    for qid in shot_qids:
        problem = problems[qid]
        examples[qid] = create_one_example_chatbot(
            prompt_format, get_question_text(problem), get_context_text(problem, use_caption),
            get_choice_text(problem, options), get_answer(problem, options), get_lecture_text(problem),
            get_solution_text(problem), test_example=is_test,
        )
    return examples
