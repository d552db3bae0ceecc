"""The one evaluation loop behind every ``model_vqa*`` loader.

A loader module only declares its extra flags, the fields its question records need, and how one record
becomes one or more :class:`EvalItem` (the user-turn text, the text stored as ``prompt``, the images; see
:mod:`llava.eval.items`). This module owns everything else:

* question files (JSONL, JSON list, MMBench TSV; see :func:`llava.eval.files.load_questions`);
* upstream's chunking: chunk ``k`` of ``n`` is the ``k``-th slice of size ``ceil(len / n)``;
* checking before doing: decoding values, the device, the projector settings, the output path and every
  question record are checked before the model loads, and nothing is written before it has loaded;
* resuming: questions already in the answers file (by question id and prompt,
  :func:`llava.eval.files.answer_identity`) are skipped, every answer is appended and handed to the operating
  system as it is produced, damaged lines are set aside (see :mod:`llava.eval.answers`); a sidecar
  ``<answers>.meta.json`` records the model, the questions and the settings that produced the answers, and
  resuming with others is refused, naming ``--overwrite`` (see :mod:`llava.eval.provenance`);
* batched greedy or sampled generation (``--batch-size``) with left padding (:mod:`llava.generation`), the next
  batch's images read and preprocessed in a background thread meanwhile (videos, which read the tokenizer to be
  loaded, are read in turn);
* the answers JSONL with upstream's fields (``question_id, prompt, text, answer_id, model_id, metadata``
  plus a loader's extras such as MMBench's ``round_id, options, option_char``);
* device and dtype: ``--device`` (default ``cuda`` when available, else ``cpu``), float16 on CUDA and
  float32 on CPU.

Typical use, from a loader::

    def build_items(record, args): ...
    SPEC = LoaderSpec(name="model_vqa", description="...", build_items=build_items,
                      fields={"question_id": QUESTION_ID, "image": str, "text": str}, max_new_tokens=1024)

    def main(argv=None):
        return run_loader(SPEC, argv)
"""

from __future__ import annotations

import argparse
import logging
import os
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from tqdm import tqdm

from llava.conversation import check_template_name
from llava.eval.answers import AnswersFile
from llava.eval.backends import add_backend_flags, loader_backend, recorded_flags
from llava.eval.files import check_fields, check_one_visual, guard_outputs, load_questions
from llava.eval.items import (
    BuildItems,
    EvalItem,
    ImageRef,
    LoaderSpec,
    answer_record,
    check_unique_items,
    chunk_bounds,
    get_chunk,
    ordinal,
    split_list,
)
from llava.eval.provenance import Provenance, model_files, producer_record, records_fingerprint

# Generation lives in llava.generation; its names stay importable from here, where loaders and tests use them.
from llava.generation import (
    GenerationConfig,
    LlavaGenerator,
    Visuals,
    check_reducer_flag,
    default_dtype,
    load_generator,
    resolve_device,
)
from llava.model.context_length import PromptTooLong
from llava.model.fast_flag import add_fast_flag, resolve_fast
from llava.utils import UserError, add_reducer_flag, setup_logging

logger = logging.getLogger(__name__)

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
    prefetch: bool = True,
) -> RunResult:
    """Answer every item not yet in ``answers_file``.

    Everything is checked before the model loads, and nothing is written before it has loaded (or when every
    question is already answered or skipped): a refused or failed start leaves the answers file and its record
    as they were (see :mod:`llava.eval.answers`).

    Args:
        items: This chunk's items, in question order.
        answers_file: JSONL to resume and append to.
        generator_factory: Loads the model; called only if something is left to answer.
        config: Sampling options.
        model_id: Written as ``model_id``.
        batch_size: Questions per ``generate`` call.
        skip_missing: Count and skip questions whose image is missing or unreadable instead of failing.
        overwrite: Replace an existing answers file (its answers stay until the first new one is written).
        producer: What produces the answers (see :func:`llava.eval.provenance.producer_record`): recorded next
            to the answers file, and a resumed file must have been produced by the same settings. ``None``
            skips the record (library use without a command line).
        prefetch: Read and preprocess the next batch's images in a background thread while the model answers this
            one (``False``: in turn, as before; ``benchmarks/loader_prefetch.py`` times both).

    Raises:
        UserError: For a missing/unreadable image without ``skip_missing`` (naming the question id), two items
            with the same identity, two answers in the file with the same identity, resuming answers produced by
            other settings, or a disk that fills up (the answers so far are kept).
    """
    if batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {batch_size}")
    check_unique_items(items)
    answers = AnswersFile(answers_file, overwrite=overwrite)
    record = None
    if producer is not None:
        record = Provenance(answers.path, producer)
        record.check(has_answers=bool(answers.existing))
    pending = [item for item in items if item.key not in answers.answered]
    result = RunResult(answers.path, total=len(items), already_answered=len(items) - len(pending), record=record)
    if record is not None and record.skipped:
        logger.info("%s: %d questions were skipped by an earlier run; trying them again", answers.path, len(record.skipped))
    if result.already_answered:
        logger.info("resuming %s: %d of %d questions already answered", answers.path, result.already_answered, len(items))
    pending = _drop_missing_files(pending, skip_missing, result)
    generator = generator_factory()[0] if pending else None  # the model loads before anything is written
    try:
        answers.begin(on_commit=None if record is None else record.commit)
        if generator is None:
            logger.info("nothing to answer in %s", answers.path)
        else:
            _answer(pending, generator, config, answers, model_id, batch_size, skip_missing, result, prefetch)
        answers.finish()
    finally:
        answers.close()
    if result.skipped:
        logger.warning(
            "skipped %d of %d questions whose image or video is missing or unreadable: %s",
            len(result.skipped), result.total, ", ".join(repr(question_id) for question_id in result.skipped[:20]),
        )
    return result


def _answer(pending: Sequence[EvalItem], generator: LlavaGenerator, config: GenerationConfig, answers: AnswersFile,
            model_id: str, batch_size: int, skip_missing: bool, result: RunResult, prefetch: bool = True) -> None:
    """Generate the pending items batch by batch, appending each answer as soon as it exists."""
    loaded_batches = _loaded_batches(list(_batches(pending, batch_size)), generator, prefetch)
    with tqdm(total=result.total, initial=result.already_answered, desc=answers.path.name, dynamic_ncols=True) as progress, \
            closing(loaded_batches):  # an error here stops the reading thread now, not when the traceback goes
        for batch, loaded in loaded_batches:
            ready, images = [], []
            for item, outcome in zip(batch, loaded.outcomes):
                if isinstance(outcome, PromptTooLong):  # a setting to change, not a question to skip
                    raise UserError(f"question {item.question_id!r}: {outcome}") from None
                if isinstance(outcome, ValueError):
                    _missing(item, str(outcome), skip_missing, result)
                    progress.update(1)
                    continue
                images.append(outcome)
                ready.append(item)
            if not ready:
                continue
            prepared = {} if loaded.visuals is None else {"visuals": loaded.visuals}
            try:
                texts = generator.generate([item.question for item in ready], images, config, **prepared)
            except PromptTooLong as error:
                shown = ", ".join(repr(item.question_id) for item in ready)
                raise UserError(f"question{'s' if len(ready) > 1 else ''} {shown}: {error}") from None
            for item, text in zip(ready, texts):
                answers.write(answer_record(item, text, model_id))
                if result.record is not None:
                    result.record.clear_skip(item.question_id)
            result.answered += len(ready)
            progress.update(len(ready))


@dataclass
class _Loaded:
    """A batch read from disk: per item its images, or the error reading them raised (``PromptTooLong`` or
    ``ValueError``), and the readable items' images preprocessed (:meth:`LlavaGenerator.prepare_visuals`)."""

    outcomes: list[Any]
    visuals: Visuals | None


def _load(batch: Sequence[EvalItem], generator: LlavaGenerator) -> _Loaded:
    outcomes: list[Any] = []
    for item in batch:
        try:
            outcomes.append([ref.load_for(generator, item.question) for ref in item.images])
        except (PromptTooLong, ValueError) as error:  # the main thread says it, in question order
            outcomes.append(error)
    ready = [outcome for outcome in outcomes if not isinstance(outcome, Exception)]
    prepare = getattr(generator, "prepare_visuals", None)  # an endpoint's client sends the images as they are
    return _Loaded(outcomes, prepare(ready) if prepare is not None and ready else None)


def _loaded_batches(batches: list[list[EvalItem]], generator: LlavaGenerator,
                    prefetch: bool) -> Iterator[tuple[list[EvalItem], _Loaded]]:
    """Each batch with its images read and preprocessed. With ``prefetch``, the next batch is read in one background
    thread while the model answers this one (as upstream's loader does with a DataLoader), unless its inputs read
    the model to load (videos check their prompt's length with the tokenizer): those load in turn, here."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="llava-prefetch") as pool:

        def start(index: int) -> Future[_Loaded] | None:
            if not prefetch or index >= len(batches):
                return None
            if any(getattr(ref, "reads_model", False) for item in batches[index] for ref in item.images):
                return None
            return pool.submit(_load, batches[index], generator)

        upcoming = start(0)
        try:
            for index, batch in enumerate(batches):
                loaded = upcoming.result() if upcoming is not None else _load(batch, generator)
                upcoming = start(index + 1)
                yield batch, loaded
        finally:  # stopped early (an error, a closed generator): the batch being read is not waited for in vain
            if upcoming is not None:
                upcoming.cancel()


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
    parser.add_argument("--temperature", type=float, default=spec.temperature)
    parser.add_argument("--top_p", type=float, default=None)
    parser.add_argument("--num_beams", type=int, default=1)
    parser.add_argument("--max_new_tokens", type=int, default=spec.max_new_tokens)
    parser.add_argument("--batch-size", "--batch_size", dest="batch_size", type=int, default=1,
                        help="questions per generate call (left padding; greedy answers equal batch size 1)")
    parser.add_argument("--skip-missing", "--skip_missing", dest="skip_missing", action="store_true",
                        help="skip and count questions whose image is missing or unreadable instead of stopping")
    parser.add_argument("--device", type=str, default=None, help="default: cuda if available, else cpu")
    add_fast_flag(parser)
    parser.add_argument("--overwrite", action="store_true",
                        help="start a new answers file instead of resuming (needed when the model or settings changed)")
    parser.add_argument("--projector-setting", "--projector_setting", dest="projector_settings", action="append",
                        type=_key_value, default=[], metavar="KEY=VALUE",
                        help="change a runtime setting of the projector's compressor after loading, or any setting of the "
                             "--projector-type compressor (repeatable)")
    parser.add_argument("--projector-type", "--projector_type", dest="projector_type", default=None, metavar="TYPE",
                        help="evaluate the checkpoint with this projector type instead of its config's mm_projector_type "
                             "(e.g. a training-free compressor in front of an mlp2x_gelu checkpoint's MLP); "
                             "the checkpoint's projector weights must load into it unchanged")
    add_reducer_flag(parser)
    for key, description in _runtime_flags():
        parser.add_argument(f"--{key}", dest=key, type=str, default=None, metavar="VALUE", help=description)
    add_backend_flags(parser)
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


def projector_settings(args: Any) -> dict[str, Any]:
    """The runtime projector settings a run asks for, normalised once: the one record of them, for loading and
    for the answers' provenance.

    ``--projector-setting KEY=VALUE`` and ``--KEY VALUE`` are two spellings of one setting: each value is parsed by
    the setting that declares it (so ``8`` and ``08`` are the same), before any model loads.

    Returns:
        ``{key: parsed value}``, sorted by key.

    Raises:
        UserError: For a key no installed compressor declares as a runtime setting, a value its setting refuses,
            or one setting given twice with different values.
    """
    from llava.model.multimodal_projector.plugins import plugin_settings

    declared = {setting.key: setting for _, setting in plugin_settings() if setting.runtime}
    declared.update(override_settings(getattr(args, "projector_type", None)))
    given = [(key, value, f"--projector-setting {key}={value}") for key, value in getattr(args, "projector_settings", None) or []]
    given += [(key, getattr(args, key), f"--{key} {getattr(args, key)}") for key in declared if getattr(args, key, None) is not None]
    settings: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, value, spelling in given:
        if key not in declared:
            raise UserError(f"{spelling}: {key!r} is not a runtime setting of any installed compressor nor a setting of the "
                            f"--projector-type compressor (accepted: {', '.join(sorted(declared)) or 'none'})")
        try:
            parsed = declared[key].parse(value)
        except ValueError as error:
            raise UserError(f"{spelling}: {error}") from None
        if key in settings and settings[key] != parsed:
            raise UserError(f"{spelling} contradicts {spelled[key]}; give each projector setting once")
        settings[key], spelled[key] = parsed, spelling
    return dict(sorted(settings.items()))


def override_settings(projector_type: str | None) -> dict[str, Any]:
    """``{key: Setting}`` of the compressor ``--projector-type`` names (all its settings, applied when it is built).

    Raises:
        UserError: For a type no installed projector plugin knows (naming the known spellings).
    """
    if projector_type is None:
        return {}
    from llava.model.multimodal_projector.plugins import plugin_for, projector_spellings

    plugin = plugin_for(projector_type)
    if plugin is None:
        raise UserError(f"--projector-type {projector_type!r} is not a known projector type; known projector types: {projector_spellings()}")
    return {setting.key: setting for setting in plugin.settings}


def _recorded_args(args: argparse.Namespace, settings: Mapping[str, Any]) -> argparse.Namespace:
    """``args`` as the answers' record keeps them: the runtime settings once, normalised, not per spelling."""
    from llava.model.multimodal_projector.plugins import plugin_settings

    runtime = {setting.key for _, setting in plugin_settings() if setting.runtime}
    recorded = argparse.Namespace(**{key: value for key, value in vars(recorded_flags(args)).items() if key not in runtime})
    recorded.projector_settings = dict(settings)
    return recorded


def _key_value(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` → ``(KEY, VALUE)`` for ``--projector-setting``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. a runtime setting of the projector), got {text!r}")
    return key.strip(), value.strip()


def build_items(spec: LoaderSpec, records: Sequence[dict[str, Any]], args: argparse.Namespace, *,
                source: str = "question file", first: int = 1) -> list[EvalItem]:
    """Items of all ``records``, each checked first against ``spec.fields``.

    Args:
        spec: The loader.
        records: Question records, in file order.
        args: The parsed flags.
        source: The question file, for messages.
        first: The position of ``records[0]`` in its file, counting from 1.

    Raises:
        UserError: For a malformed record, naming its position, the field and the value.
    """
    items: list[EvalItem] = []
    for position, record in enumerate(records, start=first):
        where = f"{source}, {ordinal(position)} question"
        check_fields(record, spec.fields, where)
        check_one_visual(record, where)
        try:
            built = spec.build_items(record, args)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as error:
            detail = str(error) if isinstance(error, ValueError) else f"{type(error).__name__}: {error}"
            raise UserError(f"{where} is malformed ({detail})") from None
        items.extend(replace(item, position=position) for item in built)
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


def read_inputs(args: argparse.Namespace, items: Sequence[EvalItem]) -> dict[str, Any]:
    """Every file a loader run reads, named for the output guard: the question file, each question's image and
    video files, and the checkpoint's own files (``--model-path``, ``--model-base``; the files resuming fingerprints).
    An answers file that is one of them would destroy it."""
    inputs: dict[str, Any] = {"--question-file": args.question_file}
    for item in items:
        for number, ref in enumerate(item.images, start=1):
            path = getattr(ref, "path", None)
            if path is not None:
                which = f" {number}" if len(item.images) > 1 else ""
                inputs[f"the {getattr(ref, 'kind', 'image')}{which} of question {item.question_id!r}"] = path
    for flag in ("--model-path", "--model-base"):
        folder = getattr(args, flag[2:].replace("-", "_"), None)
        if folder and os.path.isdir(os.path.expanduser(folder)):
            inputs.update({f"{flag}'s {path.name}": path for path in model_files(os.path.expanduser(folder))})
    return inputs


def run_parsed(
    spec: LoaderSpec,
    args: argparse.Namespace,
    *,
    generator_factory: Callable[[argparse.Namespace], tuple[LlavaGenerator, str]] | None = None,
) -> RunResult:
    """:func:`run_loader` on already parsed arguments.

    Checks, in order and before any model loads: the decoding values, the device and ``--fast``, the projector settings, the
    backend's flags (:mod:`llava.eval.backends`), the conversation template's name, the output path against the
    question file, then every record of the question file (fields and types, and that no two questions share an answer
    identity, :func:`check_unique_items`), the output path against every file the run reads (:func:`read_inputs`),
    then that a checkpoint asked about images is not a plain language model (``--backend local``) or that the
    endpoint answers and serves the model (``--backend openai``).
    """
    setup_logging()
    config = GenerationConfig(args.temperature, args.top_p, args.num_beams, args.max_new_tokens)
    device = resolve_device(args.device)
    fast = resolve_fast(getattr(args, "fast", None), device)
    settings = projector_settings(args)
    check_reducer_flag(args)
    backend = loader_backend(args, settings)
    check_template_name(args.conv_mode)
    guard_outputs(inputs={"--question-file": args.question_file}, files={"--answers-file": args.answers_file})
    records = load_questions(args.question_file)
    if spec.prepare_records is not None:
        records = spec.prepare_records(records)
    source = f"question file {args.question_file!r}"
    items = build_items(spec, records, args, source=source)
    check_unique_items(items, source)
    start, stop = chunk_bounds(len(records), args.num_chunks, args.chunk_idx)
    chunk = [item for item in items if start < (item.position or 0) <= stop]
    guard_outputs(inputs=read_inputs(args, chunk), files={"--answers-file": args.answers_file})
    if generator_factory is None:
        backend.check(chunk)
    model_id = backend.model_id()
    producer = backend.record(
        producer_record(_recorded_args(args, settings), model_id, questions=records_fingerprint(records[start:stop]))
    )
    load = backend.generator_factory(device, settings, fast)

    def factory() -> tuple[LlavaGenerator, str]:
        if generator_factory is not None:
            return generator_factory(args)
        return load()

    return run_items(
        chunk, args.answers_file, factory, config, model_id=model_id, batch_size=args.batch_size,
        skip_missing=args.skip_missing, overwrite=args.overwrite, producer=producer,
    )


__all__ = [
    "AnswersFile",
    "BuildItems",
    "EvalItem",
    "GenerationConfig",
    "ImageRef",
    "LlavaGenerator",
    "LoaderSpec",
    "RunResult",
    "answer_record",
    "args_with_defaults",
    "build_items",
    "build_parser",
    "check_unique_items",
    "chunk_bounds",
    "default_dtype",
    "get_chunk",
    "load_generator",
    "ordinal",
    "override_settings",
    "projector_settings",
    "resolve_device",
    "run_items",
    "run_loader",
    "run_parsed",
    "split_list",
]
