"""Training data: LLaVA conversation files, checked up front, then loaded lazily sample by sample.

File format (upstream's): a JSON list (or a ``.jsonl`` file, one sample per line) of
``{"id": ..., "image": "relative/path.jpg" (optional), "conversations": [{"from": "human", "value":
"<image>\\nQuestion"}, {"from": "gpt", "value": "Answer"}, ...]}``; images are found under ``--image_folder``.

Every record is checked before training starts (structure, ``<image>`` marker present exactly when an image
is given, image file present), so a bad sample stops the run in seconds rather than hours in. With
``--skip_bad_samples True`` bad records are dropped instead, and the count per reason is logged. Images are
decoded and conversations tokenized only when a sample is drawn (lazy loading).

LLaVA-NeXT's video samples are read too: ``{"video": "relative/clip.mp4", "conversations": [...]}`` with the
file under ``--video_folder``; its frames are sampled by NeXT's rule (``--frames_upbound``, ``--force_sample``,
``--video_fps``: :func:`llava.video.sample_frame_indices`), processed like images and tagged ``"video"`` for the
model (one ``<image>`` marker stands for the whole video, as NeXT trains it).
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch
from torch.utils.data import Dataset
from tqdm import tqdm

from llava.constants import DEFAULT_IMAGE_TOKEN, IGNORE_INDEX, IMAGE_TOKEN_INDEX
from llava.conversation import Conversation
from llava.mm_utils import ImageUnreadable, open_image, process_images, process_video
from llava.model.compressor_text import QuestionEncoder
from llava.utils import UserError
from llava.video import SampledVideo, VideoUnreadable, import_av, load_video

from .data_mixture import check_data_file, read_data_path
from .preprocess import GPT, HUMAN, Turn, preprocess, preprocess_multimodal, render
from .video_settings import VideoSettings, time_instruction, with_time_instruction

logger = logging.getLogger(__name__)

#: Upstream's length estimate for a sample with an image: its word count plus this many.
IMAGE_LENGTH_BONUS = 128


class BadSample(ValueError):
    """A training record that cannot be used; ``reason`` is a short key for counting."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# ---------------------------------------------------------------------------------------------- reading


def read_records(path: str | os.PathLike[str]) -> list[Any]:
    """The records of a JSON list file or a ``.jsonl`` file (blank lines skipped).

    Raises:
        ValueError: If the file is missing, is not valid JSON (naming the line), or is not a list.
    """
    path = os.fspath(path)
    check_data_file(path)
    try:
        with open(path, encoding="utf-8") as handle:
            if path.endswith(".jsonl"):
                return _read_jsonl(handle, path)
            try:
                records = json.load(handle)
            except json.JSONDecodeError as error:
                hint = " (one sample per line? name the file .jsonl)" if error.msg == "Extra data" else ""
                raise ValueError(
                    f"{path} is not valid JSON: {_json_message(error)} at line {error.lineno}, column {error.colno}{hint}"
                ) from None
    except UnicodeDecodeError as error:
        raise UserError(
            f"{path} is not UTF-8 text (byte {error.start}); expected a LLaVA training file: a JSON list or a .jsonl file"
        ) from None
    if not isinstance(records, list):
        raise ValueError(f"{path} holds a JSON {type(records).__name__}; expected a list of samples")
    return records


def _read_jsonl(handle: Any, path: str) -> list[Any]:
    records = []
    for number, line in enumerate(handle, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: line {number} is not valid JSON ({_json_message(error)} at column {error.colno})") from None
    return records


def _json_message(error: json.JSONDecodeError) -> str:
    """json's message without a trailing "at" (e.g. "Unterminated string starting at"), which the caller's position follows."""
    return error.msg.removesuffix(" at")


# ---------------------------------------------------------------------------------------------- checking


def record_turns(record: Any) -> list[Turn]:
    """``[(speaker, text), ...]`` of a record.

    Raises:
        BadSample: If the record has no usable ``conversations`` list.
    """
    if not isinstance(record, dict):
        raise BadSample("not_an_object", f"is a JSON {type(record).__name__}, not an object")
    conversations = record.get("conversations")
    if not isinstance(conversations, list) or not conversations:
        raise BadSample("no_conversations", "has no non-empty 'conversations' list")
    turns = []
    for index, turn in enumerate(conversations):
        speaker = turn.get("from") if isinstance(turn, dict) else None
        text = turn.get("value") if isinstance(turn, dict) else None
        if speaker not in (HUMAN, GPT):
            raise BadSample("bad_turn", f"turn {index} has 'from' {speaker!r}; expected 'human' or 'gpt'")
        if not isinstance(text, str) or not text.strip():
            raise BadSample("bad_turn", f"turn {index} has no text in 'value'")
        turns.append((speaker, text))
    return turns


def image_path(record: dict[str, Any], image_folder: str | None) -> str | None:
    """The image file of a record (joined to ``image_folder``), or ``None`` for a text-only record."""
    image = record.get("image")
    if image is None:
        return None
    if not isinstance(image, str) or not image:
        raise BadSample("bad_image_field", f"has 'image' {image!r}; expected one file name")
    return os.path.join(image_folder or "", image)


def video_path(record: dict[str, Any], video_folder: str | None) -> str | None:
    """The video file of a record (joined to ``video_folder``), or ``None`` for a record without one."""
    video = record.get("video")
    if video is None:
        return None
    if not isinstance(video, str) or not video:
        raise BadSample("bad_video_field", f"has 'video' {video!r}; expected one file name")
    return os.path.join(video_folder or "", video)


def check_record(
    record: Any, image_folder: str | None, multimodal: bool, conv: Conversation | None = None, video_folder: str | None = None
) -> None:
    """Raise :class:`BadSample` if ``record`` cannot be trained on (see the module docstring).

    With ``conv``, the conversation must also fit that template (turn order; two turns for ``plain``).
    """
    turns = record_turns(record)
    if isinstance(record, dict) and record.get("video") is not None:
        _check_video_record(record, turns, video_folder, multimodal, conv)
        return
    if conv is not None:
        try:
            render(turns, conv)
        except ValueError as error:
            raise BadSample("template", f"does not fit the training template: {error}") from None
    has_marker = any(DEFAULT_IMAGE_TOKEN in text for _, text in turns)
    path = image_path(record, image_folder)
    if path is None:
        if has_marker:
            raise BadSample("marker_without_image", "has '<image>' in its conversation but no 'image'")
        return
    if not multimodal:
        raise BadSample("image_without_tower", f"has image {record['image']!r} but no --vision_tower was given")
    if not has_marker:
        raise BadSample("image_without_marker", "has an image but no '<image>' marker in its conversation")
    if not os.path.isfile(path):
        raise BadSample("missing_image", f"image file {path!r} does not exist")


def _check_video_record(
    record: dict[str, Any], turns: list[Turn], video_folder: str | None, multimodal: bool, conv: Conversation | None
) -> None:
    """:func:`check_record` for a video record: one video, no image, a marker, the file present."""
    if conv is not None:
        try:
            render(turns, conv)
        except ValueError as error:
            raise BadSample("template", f"does not fit the training template: {error}") from None
    if record.get("image") is not None:
        raise BadSample("image_and_video", "has both 'image' and 'video'; give one of them")
    path = video_path(record, video_folder)
    if not multimodal:
        raise BadSample("video_without_tower", f"has video {record['video']!r} but no --vision_tower was given")
    if not any(DEFAULT_IMAGE_TOKEN in text for _, text in turns):
        raise BadSample("video_without_marker", "has a video but no '<image>' marker in its conversation")
    if not os.path.isfile(path or ""):
        hint = "" if video_folder else " (set --video_folder to the videos' root)"
        raise BadSample("missing_video", f"video file {path!r} does not exist{hint}")


def _describe(index: int, record: Any) -> str:
    sample_id = record.get("id") if isinstance(record, dict) else None
    return f"sample {index}" + (f" (id {sample_id!r})" if sample_id is not None else "")


@dataclass
class DataReport:
    """What :func:`load_training_records` kept and dropped."""

    path: str
    total: int
    kept: int = 0
    skipped: Counter = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        reasons = ", ".join(f"{reason}: {count}" for reason, count in sorted(self.skipped.items()))
        return f"{self.path}: kept {self.kept} of {self.total} samples" + (f"; skipped {reasons}" if reasons else "")


def load_training_records(
    path: str,
    image_folder: str | None,
    *,
    multimodal: bool,
    conv: Conversation | None = None,
    skip_bad: bool = False,
    video_folder: str | None = None,
    seed: int = 0,
) -> tuple[list[dict[str, Any]], DataReport]:
    """Read (one file, or a LLaVA-NeXT YAML mixture / file list: :mod:`llava.train.data_mixture`, ``random:N``
    draws seeded by ``seed``) and check every record (:func:`check_record`); stop at the first bad one, or drop bad
    ones when ``skip_bad``.

    Raises:
        UserError: If some record has a video and PyAV (the ``video`` extra) is not installed.
        ValueError: For a bad record (unless ``skip_bad``), or when no usable record is left.
    """
    records, origins = read_data_path(os.fspath(path), read_records, seed=seed)
    report = DataReport(path=os.fspath(path), total=len(records))
    if not records:
        raise ValueError(f"{path} holds no training samples")
    if multimodal and any(isinstance(record, dict) and record.get("video") is not None for record in records):
        import_av()  # before hours of checks and model loading
    kept = []
    for index, record in enumerate(tqdm(records, desc="checking samples", disable=len(records) < 10_000)):
        try:
            check_record(record, image_folder, multimodal, conv, video_folder)
        except BadSample as bad:
            if not skip_bad:
                source, position = origins[index]
                raise ValueError(
                    f"{source}: {_describe(position, record)} {bad}; fix it or pass --skip_bad_samples True to drop such samples"
                ) from None
            report.skipped[bad.reason] += 1
            report.examples.setdefault(bad.reason, f"{_describe(index, record)} {bad}")
            continue
        kept.append(record)
    report.kept = len(kept)
    if report.skipped:
        logger.warning("%s (first of each: %s)", report.summary(), "; ".join(report.examples.values()))
    if not kept:
        raise ValueError(f"{path}: no usable training samples left ({report.summary()})")
    return kept, report


# ---------------------------------------------------------------------------------------------- dataset


class LazySupervisedDataset(Dataset):
    """Checked records → ``{"input_ids": [T], "labels": [T]}``; image samples add ``"image"`` (``[3, H, W]``, or
    ``[V, 3, H, W]`` views for AnyRes) and ``"image_size"`` (the original ``(width, height)``).

    Args:
        records: From :func:`load_training_records`.
        tokenizer: The LLM's tokenizer (offsets needed, see :mod:`llava.train.preprocess`).
        conv: The training template (:func:`llava.train.preprocess.conversation_template`).
        image_folder: Root of the records' ``image`` paths.
        image_processor: The vision tower's processor; ``None`` for text-only training.
        image_aspect_ratio: ``"pad"`` (pad to square with the mean colour first), ``"square"``, or ``"anyres"`` /
            ``"anyres_max_<N>"`` (base view plus the crops of the best canvas, as at inference).
        image_grid_pinpoints: AnyRes canvases, as in ``config.json`` (expanded list of ``[width, height]``).
        mm_use_im_start_end: Wrap ``<image>`` in start/end tokens.
        skip_bad_images: ``--skip_bad_samples``: a sample whose image cannot be decoded is replaced by the next
            usable one and counted (:attr:`skipped_images`) instead of stopping the run.
        video: Where video samples live and how their frames are sampled; a video sample gives ``"image"``
            ``[F, 3, H, W]`` (its frames), ``"image_size"`` (a frame's ``(width, height)``) and ``"modality"``
            ``"video"``.
        questions: Add ``"question_ids"`` (``[L]``): the question of the sample's first human turn, for a
            compressor that reads it, as question-conditioned releases train: a
            :class:`~llava.model.compressor_text.QuestionEncoder` (the compressor's tokenizer and text), or ``True``
            for the LLM's tokenizer (:func:`llava.model.compressor_text.question_ids`).
    """

    #: Slots of the shared skip counter: the main process and up to this many - 1 dataloader workers.
    COUNTER_SLOTS = 256

    def __init__(
        self,
        records: Sequence[dict[str, Any]],
        tokenizer: Any,
        conv: Conversation,
        *,
        image_folder: str | None = None,
        image_processor: Any = None,
        image_aspect_ratio: str = "square",
        image_grid_pinpoints: Any = None,
        mm_use_im_start_end: bool = False,
        skip_bad_images: bool = False,
        video: VideoSettings | None = None,
        questions: QuestionEncoder | bool | None = None,
    ) -> None:
        self.records = list(records)
        self.video = video or VideoSettings()
        self.questions = QuestionEncoder(tokenizer) if questions is True else questions or None
        self.skip_bad_images = skip_bad_images
        # Shared memory, one slot per worker: dataloader workers are other processes, and each adds to its own
        # slot so that no count is lost to a race; the main process reads the sum.
        self._skips = torch.zeros(self.COUNTER_SLOTS, dtype=torch.int64).share_memory_()
        self.tokenizer = tokenizer
        self.conv = conv
        self.image_folder = image_folder
        self.image_processor = image_processor
        self.aspect = SimpleNamespace(image_aspect_ratio=image_aspect_ratio, image_grid_pinpoints=image_grid_pinpoints)
        self.mm_use_im_start_end = mm_use_im_start_end

    def __len__(self) -> int:
        return len(self.records)

    def _words(self, record: dict[str, Any]) -> int:
        return max(sum(len(turn["value"].split()) for turn in record["conversations"]), 1)

    @property
    def lengths(self) -> list[int]:
        """Upstream's length estimate: words, plus 128 for a sample with an image."""
        return [self._words(r) + (IMAGE_LENGTH_BONUS if _has_visual(r) else 0) for r in self.records]

    @property
    def modality_lengths(self) -> list[int]:
        """Words, negated for text-only samples (``group_by_modality_length`` keeps the signs apart)."""
        return [self._words(r) if _has_visual(r) else -self._words(r) for r in self.records]

    @property
    def multimodal(self) -> bool:
        return self.image_processor is not None

    @property
    def skipped_images(self) -> int:
        """How many times a sample was skipped because its image could not be decoded (all workers)."""
        return int(self._skips.sum())

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not self.skip_bad_images:
            return self._item(index)
        for offset in range(len(self.records)):
            try:
                return self._item((index + offset) % len(self.records))
            except (ImageUnreadable, VideoUnreadable) as error:
                worker = torch.utils.data.get_worker_info()
                self._skips[0 if worker is None else 1 + worker.id % (self.COUNTER_SLOTS - 1)] += 1
                logger.warning("skipping a sample: %s", error)
        raise ValueError("no training sample has a decodable image (every image failed; see the warnings above)")

    def _item(self, index: int) -> dict[str, torch.Tensor]:
        record = self.records[index]
        turns = record_turns(record)
        clip = video_path(record, self.video.video_folder) if self.multimodal else None
        video = self.read_video(clip, index, record) if clip is not None else None
        if video is not None and self.video.add_time_instruction:
            turns = with_time_instruction(turns, video)
        if self.multimodal:
            turns = preprocess_multimodal(
                turns, mm_use_im_start_end=self.mm_use_im_start_end, mmtag="mmtag" in self.conv.version
            )
        try:
            sample = preprocess(turns, self.tokenizer, self.conv)
        except ValueError as error:
            raise ValueError(f"{_describe(index, record)}: {error}") from None
        if self.questions:
            sample["question_ids"] = self.questions([render(turns, self.conv).text], self.conv)[0]
        path = image_path(record, self.image_folder) if self.multimodal else None
        if path is not None:
            self._check_marker_kept(sample["input_ids"], index, record)
            sample["image"], sample["image_size"] = self.load_image(path, index, record)
        if video is not None:
            self._check_marker_kept(sample["input_ids"], index, record)
            sample["image"], sample["image_size"] = process_video(video.frames, self.image_processor), video.size
            sample["modality"] = "video"
        return sample

    def _check_marker_kept(self, input_ids: torch.Tensor, index: int, record: dict[str, Any]) -> None:
        """Refuse a sample whose ``<image>`` marker lies beyond ``--model_max_length``: the collator truncates the
        ids there, and the model would be handed an image with no place for it in the text.

        Raises:
            UserError: Naming the sample, the marker's position and the flag.
        """
        limit = int(self.tokenizer.model_max_length)
        positions = (input_ids == IMAGE_TOKEN_INDEX).nonzero().flatten().tolist()
        if positions and positions[-1] >= limit:
            raise UserError(
                f"{_describe(index, record)}: --model_max_length {limit} truncates its {len(input_ids)} tokens before the "
                f"<image> marker at token {positions[-1] + 1}; raise --model_max_length (upstream trains with 2048)"
            )

    def read_video(self, path: str, index: int, record: dict[str, Any]) -> SampledVideo:
        """The video's frames as NeXT samples them (``--frames_upbound``, ``--force_sample``, ``--video_fps``).

        Raises:
            VideoUnreadable: One sentence naming the sample, the file and ``--skip_bad_samples``.
        """
        settings = self.video
        try:
            return load_video(
                path, frames_upbound=settings.frames_upbound, force_sample=settings.force_sample, video_fps=settings.video_fps
            )
        except VideoUnreadable as error:
            raise VideoUnreadable(
                f"{_describe(index, record)}: {error}; fix or remove it, or pass --skip_bad_samples True to skip such samples"
            ) from None

    def load_image(self, path: str, index: int, record: dict[str, Any]) -> tuple[torch.Tensor, tuple[int, int]]:
        """``([3, H, W] or [V, 3, H, W] pixels, (width, height))``, processed as at inference (``process_images``).

        Raises:
            ImageUnreadable: One sentence naming the sample, the file and ``--skip_bad_samples``.
        """
        try:
            image = open_image(path)
        except ImageUnreadable as error:
            raise ImageUnreadable(
                f"{_describe(index, record)}: cannot read image: {error}; fix or remove it, or pass "
                "--skip_bad_samples True to skip such samples"
            ) from None
        pixels = process_images([image], self.image_processor, self.aspect)
        return pixels[0], image.size


def _has_visual(record: dict[str, Any]) -> bool:
    return "image" in record or "video" in record


# ---------------------------------------------------------------------------------------------- batching


@dataclass
class DataCollatorForSupervisedDataset:
    """Right-pad ids (pad token) and labels (``IGNORE_INDEX``), truncate both to ``model_max_length``, stack images.

    ``images`` is ``[B, 3, H, W]``, or ``[B, V, 3, H, W]`` for AnyRes when every image has V views, else a list of
    ``[V_i, 3, H, W]`` tensors; ``image_sizes`` lists each image's ``(width, height)`` (the spatial merges need it).
    A batch with a video sample (``[F, 3, H, W]`` frames) keeps ``images`` a list and adds ``modalities``, one
    ``"image"`` / ``"video"`` tag per item, as LLaVA-NeXT's collator.
    The attention mask marks each sample's real tokens (upstream used ``ids != pad``, which also hides any
    ``<unk>`` inside a text, because pad is unk). In a batch that mixes image and text-only samples, each
    text-only sample gets an all-zero stand-in image, which the model consumes and drops (as upstream); a batch
    with no image sample carries no images.
    """

    pad_token_id: int
    model_max_length: int

    def __call__(self, instances: Sequence[dict[str, torch.Tensor]]) -> dict[str, Any]:
        lengths = [min(len(item["input_ids"]), self.model_max_length) for item in instances]
        width = max(lengths)
        input_ids = torch.full((len(instances), width), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(instances), width), IGNORE_INDEX, dtype=torch.long)
        attention_mask = torch.zeros((len(instances), width), dtype=torch.bool)
        for row, (item, length) in enumerate(zip(instances, lengths)):
            input_ids[row, :length] = item["input_ids"][:length]
            labels[row, :length] = item["labels"][:length]
            attention_mask[row, :length] = True
        batch: dict[str, Any] = {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask}
        if all("question_ids" in item for item in instances):
            batch["question_ids"] = [item["question_ids"] for item in instances]
        real = [item for item in instances if "image" in item]
        if real:
            # A stand-in copies the first image's shape and size, so that it merges (and is dropped) like a real one.
            stand_in = (torch.zeros_like(real[0]["image"]), real[0]["image_size"], real[0].get("modality", "image"))
            triples = [
                (item["image"], item["image_size"], item.get("modality", "image")) if "image" in item else stand_in
                for item in instances
            ]
            images = [image for image, _, _ in triples]
            modalities = [modality for _, _, modality in triples]
            same = all(image.shape == images[0].shape for image in images)
            batch["images"] = torch.stack(images) if same and "video" not in modalities else images
            batch["image_sizes"] = [tuple(size) for _, size, _ in triples]
            if "video" in modalities:
                batch["modalities"] = modalities
        return batch


__all__ = [
    "BadSample",
    "DataCollatorForSupervisedDataset",
    "DataReport",
    "LazySupervisedDataset",
    "VideoSettings",
    "check_record",
    "load_training_records",
    "read_records",
    "record_turns",
    "time_instruction",
    "with_time_instruction",
]
