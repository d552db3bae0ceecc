"""The one evaluation loop behind every ``model_vqa*`` loader.

A loader module only declares its extra flags and how one question record becomes one or more
:class:`EvalItem` (the user-turn text, the text stored as ``prompt``, the images). This module owns
everything else:

* question files (JSONL, JSON list, MMBench TSV; see :func:`llava.eval.files.load_questions`);
* upstream's chunking: chunk ``k`` of ``n`` is the ``k``-th slice of size ``ceil(len / n)``;
* resuming: questions already in the answers file are skipped, every answer is appended and flushed as it
  is produced, and a half-written last line left by a killed run is dropped; a sidecar
  ``<answers>.meta.json`` records the model and settings that produced the answers, and resuming with
  others is refused, naming ``--overwrite`` (see :mod:`llava.eval.provenance`);
* batched greedy or sampled generation (``--batch-size``) with left padding (:mod:`llava.generation`);
* the answers JSONL with upstream's fields (``question_id, prompt, text, answer_id, model_id, metadata``
  plus a loader's extras such as MMBench's ``round_id, options, option_char``);
* device and dtype: ``--device`` (default ``cuda`` when available, else ``cpu``), float16 on CUDA and
  float32 on CPU.

Typical use, from a loader::

    def build_items(record, args): ...
    SPEC = LoaderSpec(name="model_vqa", description="...", build_items=build_items, max_new_tokens=1024)

    def main(argv=None):
        return run_loader(SPEC, argv)
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import shortuuid
from PIL import Image
from tqdm import tqdm

from llava.eval.files import check_outputs, load_questions
# Generation lives in llava.generation; its names stay importable from here, where loaders and tests use them.
from llava.generation import GenerationConfig, LlavaGenerator, default_dtype, load_generator, resolve_device
from llava.eval.provenance import Provenance, producer_record
from llava.mm_utils import get_model_name_from_path, load_image, load_image_from_base64
from llava.utils import UserError, setup_logging

logger = logging.getLogger(__name__)

# ------------------------------------------------------------------------------------------------ items


@dataclass(frozen=True)
class ImageRef:
    """An image a question needs: a file path, or base64-encoded file content (MMBench)."""

    path: str | None = None
    base64: str | None = None

    def describe(self) -> str:
        return repr(self.path) if self.path is not None else "the embedded base64 image"

    def exists(self) -> bool:
        """Whether a file image is present (embedded images are checked when decoded)."""
        return self.path is None or os.path.isfile(self.path)

    def load(self) -> Image.Image:
        """Decode the image as RGB.

        Raises:
            ValueError: If the file is missing or the data is not a readable image.
        """
        if self.path is not None:
            return load_image(self.path)
        return load_image_from_base64(self.base64 or "").convert("RGB")


AnswerKey = tuple[Any, Any]


@dataclass(frozen=True)
class EvalItem:
    """One generation request.

    Attributes:
        question_id: Written as ``question_id``.
        question: The user turn without image markers; the core prepends one per image.
        prompt: Written as ``prompt`` (each loader keeps upstream's choice of text).
        images: Images for this question (none for text-only ScienceQA items).
        extra: Extra answer fields, e.g. ``{"round_id": 0, "options": [...], "option_char": [...]}``.
        text_aliases: More fields that also hold the generated text (Q-Bench's tools read ``response``).
    """

    question_id: Any
    question: str
    prompt: str
    images: tuple[ImageRef, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    text_aliases: tuple[str, ...] = ()

    @property
    def key(self) -> AnswerKey:
        return answer_key(self.question_id, self.extra.get("round_id"))


def answer_key(question_id: Any, round_id: Any = None) -> AnswerKey:
    """What makes an answer unique: the question id, plus the round for MMBench's ``--all-rounds``."""
    return (question_id, round_id)


BuildItems = Callable[[dict[str, Any], argparse.Namespace], Sequence[EvalItem]]


@dataclass(frozen=True)
class LoaderSpec:
    """What a ``model_vqa*`` module contributes to :func:`run_loader`.

    Attributes:
        name: Module name, used for ``prog`` and logging.
        description: ``--help`` text.
        build_items: Turns one question record into its items; raises ValueError for a malformed record.
        max_new_tokens: Default of ``--max_new_tokens`` (upstream: 128 for the loader, else 1024).
        question_file_default: Default of ``--question-file`` (upstream's placeholder).
        add_arguments: Adds the module's own flags.
        prepare_records: Runs on the whole question file before chunking (e.g. numbering records that
            carry no id, so that every chunk numbers them alike).
    """

    name: str
    description: str
    build_items: BuildItems
    max_new_tokens: int = 1024
    question_file_default: str = "tables/question.jsonl"
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    prepare_records: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None


# ------------------------------------------------------------------------------------------------ chunks


def split_list(items: Sequence[Any], num_chunks: int) -> list[list[Any]]:
    """All chunks of :func:`get_chunk`, in order (upstream's ``split_list``: slices of size ``ceil(len / n)``).

    Raises:
        ValueError: If ``num_chunks < 1``.
    """
    if num_chunks < 1:
        raise ValueError(f"--num-chunks must be at least 1, got {num_chunks}")
    size = math.ceil(len(items) / num_chunks)
    return [list(items[start : start + size]) for start in range(0, len(items), size)] if size else []


def get_chunk(items: Sequence[Any], num_chunks: int, chunk_idx: int) -> list[Any]:
    """Return chunk ``chunk_idx`` of ``num_chunks``: upstream's slices of size ``ceil(len / num_chunks)``.

    With more chunks than the slicing produces (e.g. 5 items in 4 chunks gives 3 slices of 2), the
    surplus chunks are empty, where upstream would fail.

    Raises:
        ValueError: If ``num_chunks < 1`` or ``chunk_idx`` is not in ``[0, num_chunks)``.
    """
    if num_chunks < 1:
        raise ValueError(f"--num-chunks must be at least 1, got {num_chunks}")
    if not 0 <= chunk_idx < num_chunks:
        raise ValueError(f"--chunk-idx must be in [0, {num_chunks - 1}] for --num-chunks {num_chunks}, got {chunk_idx}")
    size = math.ceil(len(items) / num_chunks)
    return list(items[chunk_idx * size : (chunk_idx + 1) * size])


# ------------------------------------------------------------------------------------------------ answers file


class AnswersFile:
    """An answers JSONL opened for resuming: reads what is there, then appends one flushed line per answer.

    On opening an existing file, a last line that is incomplete or not valid JSON (a run killed mid-write)
    is cut off; any other unreadable line is an error, since it cannot come from an interrupted run.

    Args:
        path: The answers file; its folder is created.
        overwrite: Start from an empty file instead of resuming.
        model_id: When given, resuming refuses a file holding answers of another model.
    """

    def __init__(self, path: str | os.PathLike[str], *, overwrite: bool = False, model_id: str | None = None) -> None:
        self.path = Path(os.path.expanduser(os.fspath(path)))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.answered: set[AnswerKey] = set()
        self.dropped_partial_line = False
        if overwrite or not self.path.exists():
            self.path.write_bytes(b"")
        else:
            self._scan(model_id)
        self._handle = self.path.open("a", encoding="utf-8")

    def _scan(self, model_id: str | None) -> None:
        data = self.path.read_bytes()
        # The piece after the final newline is b"" for a cleanly written file.
        pieces = data.split(b"\n")
        keep = 0  # length of the prefix of the file made of good lines
        for number, raw in enumerate(pieces, start=1):
            is_last = number == len(pieces) or (number == len(pieces) - 1 and not pieces[-1].strip())
            if raw.strip():
                record = _parse_answer(raw)
                if record is None:
                    if is_last:
                        break
                    raise ValueError(
                        f"answers file {os.fspath(self.path)!r} line {number} is not an answer object; it was not "
                        "left by an interrupted run: fix it, or pass --overwrite to start again"
                    )
                if model_id is not None and record.get("model_id", model_id) != model_id:
                    raise ValueError(
                        f"answers file {os.fspath(self.path)!r} holds answers of model {record.get('model_id')!r}, "
                        f"not {model_id!r}; pass --overwrite or choose another --answers-file"
                    )
                self.answered.add(answer_key(record["question_id"], record.get("round_id")))
            keep = min(keep + len(raw) + 1, len(data))
        if keep < len(data):
            logger.warning("answers file %s: dropping an incomplete last line left by an interrupted run", self.path)
            self.dropped_partial_line = True
            with self.path.open("r+b") as handle:
                handle.truncate(keep)
        elif keep and not data.endswith(b"\n"):
            # A complete last answer whose newline was never written.
            with self.path.open("ab") as handle:
                handle.write(b"\n")

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one answer and flush it to the operating system."""
        self._handle.write(json.dumps(record) + "\n")
        self._handle.flush()
        self.answered.add(answer_key(record["question_id"], record.get("round_id")))

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> "AnswersFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _parse_answer(raw: bytes) -> dict[str, Any] | None:
    """The answer object on one line, or None if the line is not one."""
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    return record if isinstance(record, dict) and "question_id" in record else None


def answer_record(item: EvalItem, text: str, model_id: str) -> dict[str, Any]:
    """Upstream's answer line; a loader's extras go after ``text`` (``round_id`` right after the id)."""
    record: dict[str, Any] = {"question_id": item.question_id}
    if "round_id" in item.extra:
        record["round_id"] = item.extra["round_id"]
    record["prompt"] = item.prompt
    record["text"] = text
    record.update((key, value) for key, value in item.extra.items() if key != "round_id")
    record.update((key, text) for key in item.text_aliases)
    record.update(answer_id=shortuuid.uuid(), model_id=model_id, metadata={})
    return record


# ------------------------------------------------------------------------------------------------ the loop


@dataclass
class RunResult:
    """What a loader run did."""

    answers_file: Path
    total: int
    already_answered: int
    answered: int = 0
    skipped: list[Any] = field(default_factory=list)
    record: Provenance | None = None


def _batches(items: Sequence[EvalItem], batch_size: int) -> list[list[EvalItem]]:
    """Consecutive groups of at most ``batch_size`` items with the same number of images."""
    batches: list[list[EvalItem]] = []
    for item in items:
        if batches and len(batches[-1]) < batch_size and len(batches[-1][0].images) == len(item.images):
            batches[-1].append(item)
        else:
            batches.append([item])
    return batches


def run_items(
    items: Sequence[EvalItem],
    answers_file: str | os.PathLike[str],
    generator_factory: Callable[[], tuple[LlavaGenerator, str]],
    config: GenerationConfig,
    *,
    model_id: str,
    batch_size: int = 1,
    skip_missing: bool = False,
    overwrite: bool = False,
    producer: Mapping[str, Any] | None = None,
) -> RunResult:
    """Answer every item not yet in ``answers_file``.

    Args:
        items: This chunk's items, in question order.
        answers_file: JSONL to resume and append to.
        generator_factory: Loads the model; called only if something is left to answer.
        config: Sampling options.
        model_id: Written as ``model_id``; a resumed file must hold this model's answers.
        batch_size: Questions per ``generate`` call.
        skip_missing: Count and skip questions whose image is missing or unreadable instead of failing.
        overwrite: Ignore and replace an existing answers file.
        producer: What produces the answers (see :func:`llava.eval.provenance.producer_record`): recorded next
            to a new answers file, and a resumed file must have been produced by the same settings. ``None``
            skips the record (library use without a command line).

    Raises:
        ValueError: For a missing/unreadable image without ``skip_missing`` (naming the question id),
            a duplicated question id, or resuming answers produced by other settings.
    """
    if batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {batch_size}")
    keys = [item.key for item in items]
    if len(set(keys)) != len(keys):
        duplicate = next(key for key in keys if keys.count(key) > 1)
        raise ValueError(f"question id {duplicate[0]!r} appears more than once in this chunk")
    with AnswersFile(answers_file, overwrite=overwrite, model_id=model_id) as answers:
        record = _open_record(answers, producer, overwrite)
        pending = [item for item in items if item.key not in answers.answered]
        result = RunResult(answers.path, total=len(items), already_answered=len(items) - len(pending), record=record)
        if record is not None and record.skipped:
            logger.info("%s: %d questions were skipped by an earlier run; trying them again", answers.path, len(record.skipped))
        if result.already_answered:
            logger.info("resuming %s: %d of %d questions already answered", answers.path, result.already_answered, len(items))
        pending = _drop_missing_files(pending, skip_missing, result)
        if not pending:
            logger.info("nothing to answer in %s", answers.path)
            return result
        generator, _ = generator_factory()
        with tqdm(total=len(items), initial=result.already_answered, desc=answers.path.name, dynamic_ncols=True) as progress:
            for batch in _batches(pending, batch_size):
                ready, images = [], []
                for item in batch:
                    try:
                        images.append([ref.load() for ref in item.images])
                        ready.append(item)
                    except ValueError as error:
                        _missing(item, str(error), skip_missing, result)
                        progress.update(1)
                if not ready:
                    continue
                texts = generator.generate([item.question for item in ready], images, config)
                for item, text in zip(ready, texts):
                    answers.write(answer_record(item, text, model_id))
                    if record is not None:
                        record.clear_skip(item.question_id)
                result.answered += len(ready)
                progress.update(len(ready))
    if result.skipped:
        logger.warning(
            "skipped %d of %d questions whose image is missing or unreadable: %s",
            len(result.skipped), result.total, ", ".join(repr(question_id) for question_id in result.skipped[:20]),
        )
    return result


def _open_record(answers: AnswersFile, producer: Mapping[str, Any] | None, overwrite: bool) -> Provenance | None:
    """The answers file's record of its producer: started afresh, or checked against ``producer`` on resume."""
    if producer is None:
        return None
    return Provenance(answers.path, producer).open(overwrite=overwrite, has_answers=bool(answers.answered))


def _missing(item: EvalItem, reason: str, skip_missing: bool, result: RunResult) -> None:
    if not skip_missing:
        raise UserError(f"question {item.question_id!r}: {reason} (pass --skip-missing to skip such questions)")
    logger.warning("skipping question %r: %s", item.question_id, reason)
    result.skipped.append(item.question_id)
    if result.record is not None:
        result.record.record_skip(item.question_id, reason)


def _drop_missing_files(items: list[EvalItem], skip_missing: bool, result: RunResult) -> list[EvalItem]:
    """Check image files exist before the model is loaded, so a bad path fails in seconds."""
    kept = []
    for item in items:
        absent = next((ref for ref in item.images if not ref.exists()), None)
        if absent is None:
            kept.append(item)
        else:
            _missing(item, f"{getattr(absent, 'kind', 'image')} file {absent.describe()} does not exist", skip_missing, result)
    return kept


# ------------------------------------------------------------------------------------------------ command line


def build_parser(spec: LoaderSpec) -> argparse.ArgumentParser:
    """Upstream's loader flags with upstream's defaults, plus ``--batch-size``, ``--skip-missing``,
    ``--device`` and ``--overwrite``, then the loader's own flags."""
    parser = argparse.ArgumentParser(prog=f"python -m llava.eval.{spec.name}", description=spec.description)
    parser.add_argument("--model-path", type=str, default="facebook/opt-350m")
    parser.add_argument("--model-base", type=str, default=None)
    parser.add_argument("--image-folder", type=str, default="")
    parser.add_argument("--question-file", type=str, default=spec.question_file_default)
    parser.add_argument("--answers-file", type=str, default="answer.jsonl")
    parser.add_argument("--conv-mode", type=str, default="llava_v1")
    parser.add_argument("--num-chunks", type=int, default=1)
    parser.add_argument("--chunk-idx", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=0.2)
    parser.add_argument("--top_p", type=float, default=None)
    parser.add_argument("--num_beams", type=int, default=1)
    parser.add_argument("--max_new_tokens", type=int, default=spec.max_new_tokens)
    parser.add_argument("--batch-size", "--batch_size", dest="batch_size", type=int, default=1,
                        help="questions per generate call (left padding; greedy answers equal batch size 1)")
    parser.add_argument("--skip-missing", "--skip_missing", dest="skip_missing", action="store_true",
                        help="skip and count questions whose image is missing or unreadable instead of stopping")
    parser.add_argument("--device", type=str, default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--overwrite", action="store_true",
                        help="start a new answers file instead of resuming (needed when the model or settings changed)")
    parser.add_argument("--projector-setting", "--projector_setting", dest="projector_settings", action="append",
                        type=_key_value, default=[], metavar="KEY=VALUE",
                        help="change a runtime setting of the projector's compressor after loading (repeatable)")
    for key, description in _runtime_flags():
        parser.add_argument(f"--{key}", dest=key, type=str, default=None, metavar="VALUE", help=description)
    if spec.add_arguments is not None:
        spec.add_arguments(parser)
    return parser


def _runtime_flags() -> list[tuple[str, str]]:
    """``(key, help)`` of every registered plugin's runtime settings: each is also a loader flag ``--key``."""
    from llava.model.multimodal_projector.plugins import plugin_settings

    return [
        (setting.key, f"[{plugin.name}] {setting.description} (applied to the loaded model, as --projector-setting)")
        for plugin, setting in plugin_settings() if setting.runtime
    ]


def projector_settings(args: argparse.Namespace) -> dict[str, str]:
    """The runtime settings a loader run asks for: ``--projector-setting`` pairs, then the ``--<key>`` flags."""
    settings = dict(getattr(args, "projector_settings", None) or [])
    for key, _ in _runtime_flags():
        if getattr(args, key, None) is not None:
            settings[key] = getattr(args, key)
    return settings


def _key_value(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` → ``(KEY, VALUE)`` for ``--projector-setting``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. a runtime setting of the projector), got {text!r}")
    return key.strip(), value.strip()


def build_items(spec: LoaderSpec, records: Sequence[dict[str, Any]], args: argparse.Namespace) -> list[EvalItem]:
    """Items of all ``records``; a malformed record raises a ValueError naming its position."""
    items: list[EvalItem] = []
    for position, record in enumerate(records):
        try:
            items.extend(spec.build_items(record, args))
        except (KeyError, TypeError, IndexError, AttributeError) as error:
            raise ValueError(f"question {position} of this chunk is malformed ({type(error).__name__}: {error})") from None
    return items


def run_loader(
    spec: LoaderSpec,
    argv: Sequence[str] | None = None,
    *,
    generator_factory: Callable[[argparse.Namespace], tuple[LlavaGenerator, str]] | None = None,
) -> RunResult:
    """Parse ``argv``, load and chunk the questions, then answer them.

    Args:
        spec: The loader.
        argv: Command-line arguments (``sys.argv[1:]`` when None).
        generator_factory: Replaces model loading (tests reuse one loaded model); gets the parsed args.
    """
    return run_parsed(spec, build_parser(spec).parse_args(argv), generator_factory=generator_factory)


def args_with_defaults(spec: LoaderSpec, args: Any) -> argparse.Namespace:
    """``args`` (a Namespace or any object with upstream's attribute names) completed with the command line's
    defaults, so that upstream-style callers that build their own args object work unchanged."""
    completed = build_parser(spec).parse_args([])
    for key in vars(completed):
        value = getattr(args, key, None)
        if value is not None:
            setattr(completed, key, value)
    return completed


def run_parsed(
    spec: LoaderSpec,
    args: argparse.Namespace,
    *,
    generator_factory: Callable[[argparse.Namespace], tuple[LlavaGenerator, str]] | None = None,
) -> RunResult:
    """:func:`run_loader` on already parsed arguments."""
    setup_logging()
    check_outputs({"--question-file": args.question_file}, {"--answers-file": args.answers_file})
    records = load_questions(args.question_file)
    if spec.prepare_records is not None:
        records = spec.prepare_records(records)
    records = get_chunk(records, args.num_chunks, args.chunk_idx)
    items = build_items(spec, records, args)
    model_id = get_model_name_from_path(os.path.expanduser(args.model_path))
    config = GenerationConfig(args.temperature, args.top_p, args.num_beams, args.max_new_tokens)

    def factory() -> tuple[LlavaGenerator, str]:
        if generator_factory is not None:
            return generator_factory(args)
        return load_generator(args.model_path, args.model_base, args.conv_mode, args.device, projector_settings(args))

    return run_items(
        items, args.answers_file, factory, config, model_id=model_id, batch_size=args.batch_size,
        skip_missing=args.skip_missing, overwrite=args.overwrite, producer=producer_record(args, model_id),
    )


__all__ = [
    "AnswersFile",
    "EvalItem",
    "GenerationConfig",
    "ImageRef",
    "LlavaGenerator",
    "LoaderSpec",
    "RunResult",
    "answer_key",
    "answer_record",
    "args_with_defaults",
    "build_parser",
    "default_dtype",
    "get_chunk",
    "load_generator",
    "projector_settings",
    "resolve_device",
    "run_items",
    "run_loader",
    "run_parsed",
    "split_list",
]
