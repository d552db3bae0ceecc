"""VQA answer normalisation and the 10-annotator soft accuracy used for TextVQA, VQAv2 and VizWiz.

The rules are those of the EvalAI VQA evaluation as shipped with upstream LLaVA (by way of MMF's M4C
evaluator); the scores of published checkpoints depend on them, including their quirks, which are
kept on purpose:

* the period rule is written with a malformed look-behind, so it means "a period not followed by a
  digit" (``"3."`` loses its period, ``"1.5"`` keeps it), and its flags argument lands in the
  *count* position, so at most ``re.UNICODE == 32`` periods are removed per answer;
* commas are dropped before the punctuation step, so the "digit,digit" rule of that step never fires;
* number words map to digits only for ``none``/``zero`` .. ``ten``;
* contractions are restored from a fixed table whose entries include ``"somebody'd" -> "somebodyd"``
  and a few capitalised keys that can never match lower-cased text.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

# "short=long" pairs of the EvalAI contraction table, one whitespace-separated token each.
_CONTRACTION_PAIRS = """
aint=ain't arent=aren't cant=can't couldve=could've couldnt=couldn't couldn'tve=couldn't've
couldnt've=couldn't've didnt=didn't doesnt=doesn't dont=don't hadnt=hadn't hadnt've=hadn't've
hadn'tve=hadn't've hasnt=hasn't havent=haven't hed=he'd hed've=he'd've he'dve=he'd've hes=he's
howd=how'd howll=how'll hows=how's Id've=I'd've I'dve=I'd've Im=I'm Ive=I've isnt=isn't itd=it'd
itd've=it'd've it'dve=it'd've itll=it'll let's=let's maam=ma'am mightnt=mightn't
mightnt've=mightn't've mightn'tve=mightn't've mightve=might've mustnt=mustn't mustve=must've
neednt=needn't notve=not've oclock=o'clock oughtnt=oughtn't ow's'at='ow's'at 'ows'at='ow's'at
'ow'sat='ow's'at shant=shan't shed've=she'd've she'dve=she'd've she's=she's shouldve=should've
shouldnt=shouldn't shouldnt've=shouldn't've shouldn'tve=shouldn't've somebody'd=somebodyd
somebodyd've=somebody'd've somebody'dve=somebody'd've somebodyll=somebody'll somebodys=somebody's
someoned=someone'd someoned've=someone'd've someone'dve=someone'd've someonell=someone'll
someones=someone's somethingd=something'd somethingd've=something'd've
something'dve=something'd've somethingll=something'll thats=that's thered=there'd
thered've=there'd've there'dve=there'd've therere=there're theres=there's theyd=they'd
theyd've=they'd've they'dve=they'd've theyll=they'll theyre=they're theyve=they've twas='twas
wasnt=wasn't wed've=we'd've we'dve=we'd've weve=we've werent=weren't whatll=what'll
whatre=what're whats=what's whatve=what've whens=when's whered=where'd wheres=where's
whereve=where've whod=who'd whod've=who'd've who'dve=who'd've wholl=who'll whos=who's
whove=who've whyll=why'll whyre=why're whys=why's wont=won't wouldve=would've wouldnt=wouldn't
wouldnt've=wouldn't've wouldn'tve=wouldn't've yall=y'all yall'll=y'all'll y'allll=y'all'll
yall'd've=y'all'd've y'alld've=y'all'd've y'all'dve=y'all'd've youd=you'd youd've=you'd've
you'dve=you'd've youll=you'll youre=you're youve=you've
"""

CONTRACTIONS: dict[str, str] = dict(pair.split("=", 1) for pair in _CONTRACTION_PAIRS.split())

NUMBER_WORDS: dict[str, str] = {
    word: str(value)
    for value, word in enumerate(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"])
}
NUMBER_WORDS["none"] = "0"

ARTICLES = frozenset({"a", "an", "the"})

# Removed (or turned into spaces, see process_punctuation); "." and "'" are not in the list.
PUNCTUATIONS: tuple[str, ...] = tuple(';/[]"{}()=+\\_-><@`,?!')

_COMMA_BETWEEN_DIGITS = re.compile(r"(?<=\d),+(?=\d)")
_PERIOD_NOT_BEFORE_DIGIT = re.compile(r"\.(?!\d)")
# re.UNICODE's integer value, which the reference implementation passes as the substitution count.
_PERIOD_REMOVAL_LIMIT = int(re.UNICODE)


class EvalAIAnswerProcessor:
    """Normalise a free-form answer the way the EvalAI VQA evaluation does.

    Steps: lower-case, drop ``,`` and ``?``, split ``'s`` off its word, flatten newlines/tabs,
    handle punctuation, drop articles, map number words to digits, restore contractions.

    Example::

        EvalAIAnswerProcessor()("The Two dogs.")  # -> "2 dogs"
    """

    CONTRACTIONS = CONTRACTIONS
    NUMBER_MAP = NUMBER_WORDS
    ARTICLES = ARTICLES
    PUNCTUATIONS = PUNCTUATIONS

    def word_tokenize(self, word: str) -> str:
        """Lower-case, drop commas and question marks, and write ``'s`` as a separate token."""
        return word.lower().replace(",", "").replace("?", "").replace("'s", " 's").strip()

    def process_punctuation(self, in_text: str) -> str:
        """Remove punctuation marks, or turn them into spaces when they sit inside a word.

        A mark is deleted when it touches a space anywhere in the text (or when the text has a
        comma between digits); otherwise every occurrence becomes a space. Then periods that do not
        precede a digit are deleted (at most 32 of them, see the module notes).
        """
        out_text = in_text
        has_digit_comma = _COMMA_BETWEEN_DIGITS.search(in_text) is not None
        for mark in self.PUNCTUATIONS:
            if has_digit_comma or f"{mark} " in in_text or f" {mark}" in in_text:
                out_text = out_text.replace(mark, "")
            else:
                out_text = out_text.replace(mark, " ")
        return _PERIOD_NOT_BEFORE_DIGIT.sub("", out_text, count=_PERIOD_REMOVAL_LIMIT)

    def process_digit_article(self, in_text: str) -> str:
        """Map number words to digits, drop articles, restore contractions; single-space the words."""
        words = [self.NUMBER_MAP.get(word, word) for word in in_text.lower().split()]
        words = [word for word in words if word not in self.ARTICLES]
        return " ".join(self.CONTRACTIONS.get(word, word) for word in words)

    def __call__(self, item: str) -> str:
        item = self.word_tokenize(item)
        item = item.replace("\n", " ").replace("\t", " ").strip()
        item = self.process_punctuation(item)
        return self.process_digit_article(item)


class TextVQAAccuracyEvaluator:
    """VQA soft accuracy against 10 human answers.

    For every way of leaving one annotator out, an answer scores ``min(1, matches among the other
    nine / 3)``; its score is the mean over the ten leave-one-out rounds. Answers and predictions are
    normalised with :class:`EvalAIAnswerProcessor` first.
    """

    def __init__(self) -> None:
        self.answer_processor = EvalAIAnswerProcessor()

    def _compute_answer_scores(self, raw_answers: Sequence[str]) -> dict[str, float]:
        """Return the soft score of every distinct (normalised) human answer.

        Raises:
            ValueError: If there are not exactly 10 human answers.
        """
        answers = [self.answer_processor(answer) for answer in raw_answers]
        if len(answers) != 10:
            raise ValueError(f"expected 10 human answers per question, got {len(answers)}")
        scores: dict[str, float] = {}
        for candidate in set(answers):
            total = 0.0
            for left_out in range(len(answers)):
                matches = sum(
                    1 for index, answer in enumerate(answers) if index != left_out and answer == candidate
                )
                total += min(1.0, matches / 3)
            scores[candidate] = total / len(answers)
        return scores

    def eval_pred_list(self, pred_list: Iterable[dict]) -> float:
        """Mean soft accuracy of ``[{"pred_answer": str, "gt_answers": [10 x str]}, ...]`` in [0, 1].

        Raises:
            ValueError: If the list is empty.
        """
        scores = [self.score_one(entry["pred_answer"], entry["gt_answers"]) for entry in pred_list]
        if not scores:
            raise ValueError("expected at least one prediction to score, got none")
        return sum(scores) / len(scores)

    def score_one(self, pred_answer: str, gt_answers: Sequence[str]) -> float:
        """Soft accuracy of one prediction against its 10 human answers."""
        return self._compute_answer_scores(gt_answers).get(self.answer_processor(pred_answer), 0.0)


__all__ = ["EvalAIAnswerProcessor", "TextVQAAccuracyEvaluator"]
