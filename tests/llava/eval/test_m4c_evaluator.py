"""VQA answer normalisation (EvalAI rules, quirks included) and the 10-annotator soft accuracy."""

from __future__ import annotations

import pytest

from llava.eval.m4c_evaluator import CONTRACTIONS, EvalAIAnswerProcessor, TextVQAAccuracyEvaluator


@pytest.fixture(scope="module")
def processor() -> EvalAIAnswerProcessor:
    return EvalAIAnswerProcessor()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # articles dropped, number words mapped, case folded, trailing period removed
        ("The Two dogs.", "2 dogs"),
        ("an apple", "apple"),
        ("A", ""),
        ("none", "0"),
        ("ten", "10"),
        ("eleven", "eleven"),
        # periods: removed unless a digit follows
        ("3.", "3"),
        ("1.5", "1.5"),
        ("u.s.a.", "usa"),
        # punctuation: a mark inside a word becomes a space, a mark next to a space disappears
        ("coca-cola", "coca cola"),
        ("coca - cola", "coca cola"),
        ("hello!", "hello"),
        ("(left)", "left"),
        ("yes/no", "yes no"),
        ("Yes, sir?", "yes sir"),
        # commas go before the punctuation step, so "1,000" is just "1000"
        ("1,000", "1000"),
        # contractions restored; 's split off
        ("dont", "don't"),
        ("isnt it", "isn't it"),
        ("Its", "its"),
        ("it's", "it 's"),
        ("wont", "won't"),
        ("Im", "im"),  # the table's capitalised keys never match lower-cased text
        ("somebody'd", "somebodyd"),  # a quirk of the reference table, kept
        # whitespace
        ("  red\tand\nblue  ", "red and blue"),
    ],
)
def test_normalisation(processor: EvalAIAnswerProcessor, raw: str, expected: str) -> None:
    assert processor(raw) == expected


def test_period_removal_stops_after_32(processor: EvalAIAnswerProcessor) -> None:
    # re.UNICODE (32) lands in sub()'s count argument in the reference implementation.
    text = "x." * 40
    assert processor(text) == "x" * 33 + ".x" * 7 + "."


def test_contraction_table_size() -> None:
    assert len(CONTRACTIONS) == 120
    assert CONTRACTIONS["yall'd've"] == "y'all'd've"


def test_soft_accuracy_by_hand() -> None:
    evaluator = TextVQAAccuracyEvaluator()
    entries = [
        # 3 x "coca cola" (after normalisation), 7 x "pepsi":
        # leave out one of the 3 -> 2 matches -> 2/3; leave out a pepsi -> 3 matches -> 1. (3*2/3 + 7)/10 = 0.9
        {"pred_answer": "Coca Cola", "gt_answers": ["Coca-Cola", "coca-cola", "coca cola"] + ["pepsi"] * 7},
        # 7 matches whichever is left out -> 1.0
        {"pred_answer": "The Pepsi.", "gt_answers": ["Coca-Cola"] * 3 + ["pepsi"] * 7},
        {"pred_answer": "sprite", "gt_answers": ["Coca-Cola"] * 3 + ["pepsi"] * 7},
        # "two" == "2": two matches; leaving one of them out -> 1/3, else 2/3. (2/3 + 8*2/3)/10 = 0.6
        {"pred_answer": "2", "gt_answers": ["two", "2"] + ["3"] * 8},
    ]
    scores = [evaluator.score_one(e["pred_answer"], e["gt_answers"]) for e in entries]
    assert scores == pytest.approx([0.9, 1.0, 0.0, 0.6])
    assert evaluator.eval_pred_list(entries) == pytest.approx(2.5 / 4)


def test_soft_accuracy_needs_ten_answers() -> None:
    with pytest.raises(ValueError, match="expected 10 human answers"):
        TextVQAAccuracyEvaluator().score_one("a", ["a"] * 9)
