"""Constants shared across the package, with the values upstream LLaVA uses.

The numeric ids and token strings are part of the data and checkpoint format: ``IMAGE_TOKEN_INDEX``
marks where image features are spliced into ``input_ids`` and ``IGNORE_INDEX`` is the label value the
loss skips, so changing any of them breaks compatibility with upstream data and checkpoints.
"""

from __future__ import annotations

# Serving: seconds before the controller drops a silent worker, and the worker's heartbeat period.
CONTROLLER_HEART_BEAT_EXPIRATION = 30
WORKER_HEART_BEAT_INTERVAL = 15

# Directory that log files are written to.
LOGDIR = "."

# Label id ignored by the cross-entropy loss, and the placeholder id for one image in input_ids.
IGNORE_INDEX = -100
IMAGE_TOKEN_INDEX = -200

DEFAULT_IMAGE_TOKEN = "<image>"
DEFAULT_IMAGE_PATCH_TOKEN = "<im_patch>"
DEFAULT_IM_START_TOKEN = "<im_start>"
DEFAULT_IM_END_TOKEN = "<im_end>"
IMAGE_PLACEHOLDER = "<image-placeholder>"

# The answer-format instructions LLaVA's evaluation prompts add to a question: the short-answer line of its
# question files (GQA, VQAv2, POPE, TextVQA, ...) and the letter instruction of ScienceQA and MMBench (per language).
SHORT_ANSWER_PROMPT = "Answer the question using a single word or phrase."
LETTER_ANSWER_PROMPTS = {"en": "Answer with the option's letter from the given choices directly.", "cn": "请直接回答选项字母。"}

__all__ = [
    "CONTROLLER_HEART_BEAT_EXPIRATION",
    "WORKER_HEART_BEAT_INTERVAL",
    "LOGDIR",
    "IGNORE_INDEX",
    "IMAGE_TOKEN_INDEX",
    "DEFAULT_IMAGE_TOKEN",
    "DEFAULT_IMAGE_PATCH_TOKEN",
    "DEFAULT_IM_START_TOKEN",
    "DEFAULT_IM_END_TOKEN",
    "IMAGE_PLACEHOLDER",
    "SHORT_ANSWER_PROMPT",
    "LETTER_ANSWER_PROMPTS",
]
