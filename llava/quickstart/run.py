"""Run the quickstart: data, tiny models, two-stage training per projector, held-out answers, report.

Every step goes through the code a user runs: ``llava.train.train`` with upstream's command-line flags (the
paper's recipe: stage 1 ``--version plain --tune_mm_mlp_adapter True``, stage 2 ``--version`` the backbone's
chat template from the stage-1 ``mm_projector.bin``), then ``llava.eval.model_vqa_loader`` on the saved
checkpoint with that template as ``--conv-mode``. ``--backbone`` picks the tiny tower × LLM pair
(:mod:`.backbones`: ``llama-clip``, the default, trains with ``vicuna_v1`` = upstream's ``v1``; ``qwen2-siglip``
with ``qwen_1_5``). Differences from
the paper's settings, because the models are tiny and start from random weights: learning rate 1e-3 in
stage 2 (not 2e-5), several epochs, batch 16.

``--reducers`` (types, or ``all``: :mod:`.reducers`) then answers the held-out questions again on the trained
``mlp2x_gelu`` checkpoint under each in-LLM reducer, through ``model_vqa_loader --reducer`` (no training), one table
row each (``mlp2x_gelu + <reducer>``, with its image tokens per LLM layer), answers in
``runs/mlp2x_gelu/reducers/<reducer>/answers.jsonl``.

``--video`` runs the same steps on short clips of moving shapes (:mod:`.video`: questions about order and motion) as a
wiring check of the video path (no projector learns those questions at this size; the run says so),
with ``llava.eval.model_vqa_video`` for the answers and, by default, ``mlp2x_gelu`` (LLaVA-NeXT's 2-D pool gives
16 tokens per frame on the 8 × 8 grid) and three compressors at the same 16 tokens per frame.

Output folder layout: ``data/`` (images, training files, questions), ``models/`` (tokenizer, tower, base
LLM), ``runs/<projector>/{llava-<projector>-pretrain,llava-<projector>,answers.jsonl}`` (stage 1, stage 2, held-out
answers; each checkpoint's ``config.json`` names the tower relative to itself, so it loads from any folder),
``results.json``, ``quickstart.png``, and the marker file ``.llava-quickstart``. The run ends by printing the
checkpoints and the commands to answer with one, chat with it and compare (:mod:`.next_steps`).

The quickstart writes only into a new or empty folder, or one holding its marker (a folder it created): a folder
of the user's own, such as ``playground``, is refused untouched. A location that cannot be written is refused
before anything runs, and a disk that fills up midway is one sentence naming ``--out``.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import torch

from llava.conversation import check_template_fits, conv_templates
from llava.eval.compare import plot_pareto
from llava.mm_utils import tokenizer_image_token
from llava.model.fast_flag import add_fast_flag, resolve_fast
from llava.outputs import check_writable_folder, disk_errors
from llava.utils import setup_logging

from .backbones import BACKBONES, DEFAULT_BACKBONE, resolve_backbone
from .next_steps import next_steps, tower_beside
from .reducers import ALL as ALL_REDUCERS
from .reducers import expand_reducers
from .report import (
    VANILLA_PATTERN,
    RunResult,
    comparison,
    format_table,
    plot_results,
    prefill_flops,
    score_answers,
    write_results,
)
from .scenes import DatasetFiles, corpus, write_dataset

logger = logging.getLogger(__name__)

#: Written into every output folder the quickstart creates; only such a folder's parts are ever replaced.
MARKER = ".llava-quickstart"
#: The sub-folders a new run replaces.
OWNED = ("data", "models", "runs")


#: What ``--help`` says the default comparison is (the list itself comes from the installed plugins).
DEFAULT_WORDS = "upstream's mlp2x_gelu and the types each installed compressor plugin showcases"
#: ``--projectors all``: upstream's projector, then every registered compressor at ``--budget``.
ALL = "all"
VANILLA_PROJECTOR = "mlp2x_gelu"


def default_projectors(video: bool = False) -> tuple[str, ...]:
    """The default comparison: what the registered plugins showcase (images), or showcase for videos (``video``):
    with this project's plugins, mlp2x_gelu and a compressor on images; mlp2x_gelu (NeXT's pooled 8 x 8 → 4 x 4 = 16
    per frame) and compressors at 16 tokens per frame on videos."""
    from llava.model.multimodal_projector.plugins import showcase

    return showcase(video=video)


def expand_projectors(names: Sequence[str], budget: int) -> tuple[tuple[str, ...], list[str]]:
    """``names`` with ``all`` replaced by ``mlp2x_gelu`` and each plugin's projector types at ``budget``.

    Returns:
        ``(projector types, notes on plugins left out)``; a plugin is left out when it refuses the budget or
        declares no types per budget (its ``CostModel.types_at_budget``).
    """
    from llava.cost.module import types_at_budget

    out: list[str] = []
    notes: list[str] = []
    for name in names:
        if name != ALL:
            out.append(name)
            continue
        out.append(VANILLA_PROJECTOR)
        for plugin, types in types_at_budget(budget).items():
            if isinstance(types, str):
                notes.append(f"{plugin} at budget {budget}: {types}")
            else:
                out.extend(types)
    return tuple(dict.fromkeys(out)), notes


@dataclass(frozen=True)
class QuickstartConfig:
    """Sizes of one quickstart run (defaults: the full run, about 4 minutes on 2 CPU cores)."""

    #: Empty: the installed plugins' showcase (:func:`default_projectors`).
    projectors: tuple[str, ...] = ()
    #: In-LLM reducer types (or ``all``) run on the trained vanilla checkpoint after training (:mod:`.reducers`).
    reducers: tuple[str, ...] = ()
    backbone: str = DEFAULT_BACKBONE
    budget: int = 9
    train_scenes: int = 2000
    test_questions: int = 300
    turns_per_scene: int = 3
    pretrain_epochs: float = 1.0
    finetune_epochs: float = 4.0
    batch_size: int = 16
    pretrain_lr: float = 1e-3
    finetune_lr: float = 1e-3
    image_size: int = 64
    patch_size: int = 8
    tower_hidden: int = 64
    #: Two encoder layers: mm_vision_select_layer -2 reads the first one's output, so the pruners that read the
    #: attention of the layer that produced the features (ModelNeeds(attention=0)) have one.
    tower_layers: int = 2
    position_scale: float = 20.0
    llm_hidden: int = 128
    llm_layers: int = 2
    vocab_size: int = 700
    seed: int = 0
    #: Clips of moving shapes instead of still scenes (``train_scenes`` then counts clips).
    video: bool = False
    #: The answering loaders' ``--fast`` (``None``: their default, eager on the CPU).
    fast: str | None = None


#: ``--reduced``: the same steps on less data and fewer epochs (CI).
REDUCED = QuickstartConfig(train_scenes=1000, test_questions=150, finetune_epochs=3.0)
#: ``--video`` (each clip is 4 frames, so fewer of them), and ``--video --reduced``.
VIDEO = QuickstartConfig(train_scenes=600, test_questions=150, finetune_epochs=3.0, video=True)
VIDEO_REDUCED = replace(VIDEO, train_scenes=300, test_questions=90, finetune_epochs=2.0)


#: The tiny LLM's attention heads.
LLM_HEADS = 4


def llm_config(config: QuickstartConfig) -> SimpleNamespace:
    """The tiny LLM's dimensions as its config names them (what a reducer's factory checks its layers against)."""
    return SimpleNamespace(hidden_size=config.llm_hidden, intermediate_size=2 * config.llm_hidden, num_hidden_layers=config.llm_layers,
                           num_attention_heads=LLM_HEADS, vocab_size=config.vocab_size)


def image_tokens(config: QuickstartConfig) -> int:
    """The image tokens the vanilla projector sends to the LLM: the tower's whole patch grid (a CLS token dropped)."""
    return (config.image_size // config.patch_size) ** 2


@dataclass(frozen=True)
class Models:
    tokenizer: Path
    tower: Path
    llm: Path
    #: The backbone's chat template: stage 2's ``--version`` and the answers' ``--conv-mode``.
    template: str


def build_models(root: Path, config: QuickstartConfig) -> Models:
    """The backbone's tokenizer trained on the quickstart's texts, its random tower and its random LLM."""
    from llava.testing.tiny import build_tiny_llm, build_tiny_vision_tower, train_tiny_tokenizer_for

    from .video import video_corpus

    backbone = resolve_backbone(config.backbone)
    texts = video_corpus(backbone.template) if config.video else corpus(backbone.template)
    tokenizer = train_tiny_tokenizer_for(backbone.llm, root / "tokenizer", texts=texts, vocab_size=config.vocab_size)
    tower = build_tiny_vision_tower(
        backbone.tower_kind, root / backbone.tower_dir, image_size=config.image_size, patch_size=config.patch_size,
        hidden=config.tower_hidden, layers=config.tower_layers, heads=2, seed=config.seed,
    )
    scale_position_embeddings(tower, config.position_scale)
    shape = llm_config(config)
    llm = build_tiny_llm(
        root / backbone.llm_dir, tokenizer, hidden=shape.hidden_size, layers=shape.num_hidden_layers, heads=shape.num_attention_heads,
        intermediate=shape.intermediate_size, max_position=512, seed=config.seed, llm=backbone.llm,
    )
    return Models(tokenizer, tower, llm, backbone.template)


def scale_position_embeddings(tower_dir: Path, factor: float) -> None:
    """Multiply a saved tower's position embeddings (CLIP and SigLIP name them alike) by ``factor``.

    A random tower's position embeddings are tiny next to its patch embeddings (both start with std 0.02, but
    a patch embedding sums 192 pixel terms), so its features barely say where a patch is; a trained tower's
    features do. Scaling them up gives the random stand-in that property.
    """
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(tower_dir))
    # the vision model's (a whole CLIP checkpoint also holds the text tower's, under text_model.)
    name = next(name for name, _ in model.named_parameters()
                if name.endswith("embeddings.position_embedding.weight") and not name.startswith("text_model."))
    with torch.no_grad():
        model.get_parameter(name).mul_(factor)
    model.save_pretrained(str(tower_dir))


def _common_flags(models: Models, data: DatasetFiles, projector: str, config: QuickstartConfig) -> list[str]:
    return [
        "--model_name_or_path", str(models.llm), "--vision_tower", str(models.tower), "--mm_projector_type", projector,
        "--mm_vision_select_layer", "-2", "--mm_use_im_start_end", "False", "--mm_use_im_patch_token", "False",
        "--image_folder", str(data.images), "--per_device_train_batch_size", str(config.batch_size),
        "--gradient_accumulation_steps", "1", "--eval_strategy", "no", "--save_strategy", "no",
        "--weight_decay", "0.", "--warmup_steps", "0.03", "--lr_scheduler_type", "cosine", "--logging_steps", "25",
        "--model_max_length", "512", "--dataloader_num_workers", "0", "--report_to", "none",
        "--seed", str(config.seed), "--use_cpu", "True",
    ]


def pretrain_flags(models: Models, data: DatasetFiles, projector: str, config: QuickstartConfig, output: Path) -> list[str]:
    """Stage 1: ``plain`` captions, only the projector (a compressor included) trains."""
    return _common_flags(models, data, projector, config) + [
        "--version", "plain", "--data_path", str(data.pretrain), "--tune_mm_mlp_adapter", "True",
        "--num_train_epochs", str(config.pretrain_epochs), "--learning_rate", str(config.pretrain_lr), "--output_dir", str(output),
    ]


def finetune_flags(models: Models, data: DatasetFiles, projector: str, config: QuickstartConfig, output: Path, adapter: Path) -> list[str]:
    """Stage 2: conversations in the backbone's template, LLM + projector train, from the stage-1 projector."""
    return _common_flags(models, data, projector, config) + [
        "--version", models.template, "--data_path", str(data.finetune), "--pretrain_mm_mlp_adapter", str(adapter),
        "--image_aspect_ratio", "pad", "--group_by_modality_length", "True",
        "--num_train_epochs", str(config.finetune_epochs), "--learning_rate", str(config.finetune_lr), "--output_dir", str(output),
    ]


def answer_flags(checkpoint: Path, data: DatasetFiles, answers: Path, conv_mode: str, fast: str | None = None) -> list[str]:
    return [
        "--model-path", str(checkpoint), "--question-file", str(data.questions), "--image-folder", str(data.images),
        "--answers-file", str(answers), "--temperature", "0", "--conv-mode", conv_mode, "--max_new_tokens", "4",
        "--batch-size", "16", "--device", "cpu", "--overwrite", *fast_flags(fast),
    ]


def fast_flags(fast: str | None) -> list[str]:
    """``["--fast", fast]``, or nothing for the loaders' default."""
    return [] if fast is None else ["--fast", fast]


def mean_prompt_tokens(data: DatasetFiles, tokenizer_dir: Path, conv_mode: str) -> int:
    """Mean number of text tokens in the held-out prompts (the image marker not counted)."""
    from llava.eval.files import read_jsonl
    from llava.model.tokenizer_loading import load_tokenizer

    tokenizer = load_tokenizer(str(tokenizer_dir))
    check_template_fits(conv_mode, tokenizer)
    counts = []
    for record in read_jsonl(data.questions, what="question file"):  # an image or a video: one marker either way
        conv = conv_templates[conv_mode].copy()
        conv.append_message(conv.roles[0], "<image>\n" + record["text"])
        conv.append_message(conv.roles[1], None)
        counts.append(len(tokenizer_image_token(conv.get_prompt(), tokenizer)) - 1)
    return round(sum(counts) / len(counts))


def run_projector(projector: str, models: Models, data: DatasetFiles, config: QuickstartConfig, root: Path, prompt_tokens: int) -> RunResult:
    """Stage 1, stage 2 and the held-out answers for one projector (clips: ``model_vqa_video``)."""
    from llava.eval import model_vqa_video
    from llava.train.train import train

    from .video import video_answer_flags, video_prefill_flops

    pretrain_dir = root / f"llava-{projector}-pretrain"
    finetune_dir = root / f"llava-{projector}"
    answers = root / "answers.jsonl"
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    train(argv=pretrain_flags(models, data, projector, config, pretrain_dir))
    tower_beside(pretrain_dir, models.tower)
    seconds["stage1"] = time.perf_counter() - started
    started = time.perf_counter()
    train(argv=finetune_flags(models, data, projector, config, finetune_dir, pretrain_dir / "mm_projector.bin"))
    tower_beside(finetune_dir, models.tower)  # loads from any folder, and after out/ is moved as a whole
    seconds["stage2"] = time.perf_counter() - started
    if config.video:
        started = time.perf_counter()
        model_vqa_video.main(video_answer_flags(finetune_dir, data, answers, models.template) + fast_flags(config.fast))
        seconds["eval"] = time.perf_counter() - started
        flops = video_prefill_flops(finetune_dir, prompt_tokens)
        return RunResult(
            projector=projector, visual_tokens=flops["visual_tokens"], score=score_answers(answers, data.gold), flops=flops,
            seconds=seconds, checkpoint=str(finetune_dir), answers=str(answers),
        )
    return answer_images(projector, finetune_dir, answers, models, data, config, prompt_tokens, seconds)


def answer_images(projector: str, checkpoint: Path, answers: Path, models: Models, data: DatasetFiles, config: QuickstartConfig,
                  prompt_tokens: int, seconds: dict[str, float], reducer: str | None = None) -> RunResult:
    """The held-out image answers of a trained checkpoint through ``model_vqa_loader`` (with its ``--reducer``
    when ``reducer`` is given), scored and counted (per LLM layer under ``reducer``)."""
    from llava.eval import model_vqa_loader

    started = time.perf_counter()
    reducer_flags = [] if reducer is None else ["--reducer", reducer]
    model_vqa_loader.main(answer_flags(checkpoint, data, answers, models.template, config.fast) + reducer_flags)
    seconds = {**seconds, "eval": time.perf_counter() - started}
    flops = prefill_flops(checkpoint, prompt_tokens, reducer=reducer)
    return RunResult(
        projector=projector, visual_tokens=flops["visual_tokens"], score=score_answers(answers, data.gold), flops=flops,
        seconds=seconds, checkpoint=str(checkpoint), answers=str(answers), reducer=reducer,
    )


def run_reducer(reducer: str, vanilla: RunResult, models: Models, data: DatasetFiles, config: QuickstartConfig,
                prompt_tokens: int) -> RunResult:
    """The held-out answers of the trained vanilla checkpoint under the in-LLM reducer ``reducer`` (no training), into
    ``runs/<vanilla>/reducers/<reducer>/answers.jsonl``."""
    folder = Path(vanilla.answers).parent / "reducers" / reducer
    folder.mkdir(parents=True, exist_ok=True)
    return answer_images(vanilla.projector, Path(vanilla.checkpoint), folder / "answers.jsonl", models, data, config,
                         prompt_tokens, {}, reducer=reducer)


def validate_config(config: QuickstartConfig) -> None:
    """Check the settings before anything is written: every projector name resolves, sizes are positive, ``fast``
    runs on the CPU.

    Raises:
        ValueError: Naming the first bad setting and what is accepted.
    """
    from llava.model.multimodal_projector.builder import resolve_projector

    resolve_backbone(config.backbone)
    if not config.projectors:
        raise ValueError(f"the quickstart needs at least one projector (e.g. --projectors {VANILLA_PROJECTOR})")
    for projector in config.projectors:
        resolve_projector(projector)
    if config.reducers and config.video:
        raise ValueError("--reducers runs on the image quickstart (a reducer is counted for one image's prefill); drop --video or --reducers")
    if config.reducers and vanilla_projector(config.projectors) is None:
        raise ValueError(f"--reducers runs on the trained vanilla checkpoint, but --projectors {' '.join(config.projectors)} has none; "
                         f"add {VANILLA_PROJECTOR} to --projectors")
    for name in ("train_scenes", "test_questions", "turns_per_scene", "batch_size"):
        value = getattr(config, name)
        if value < 1:
            raise ValueError(f"quickstart setting {name} must be at least 1, got {value}")
    resolve_fast(config.fast, "cpu")  # the answers run on the CPU: --fast cudagraph is one sentence, before any work


def vanilla_projector(projectors: Sequence[str]) -> str | None:
    """The projector the reducers run on and the table normalises by: the first ``mlp{N}x_gelu``, or ``None``."""
    return next((name for name in projectors if re.fullmatch(VANILLA_PATTERN, name)), None)


def prepare_out(out: str | Path) -> Path:
    """Make ``out`` ready for a run without ever deleting what the quickstart did not create.

    A missing or empty folder is created and marked; a folder holding :data:`MARKER` (an earlier quickstart
    run) has its :data:`OWNED` sub-folders removed; anything else is refused.

    Raises:
        ValueError: If ``out`` is a file, or a non-empty folder without the marker.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {os.fspath(out)!r} is a file; pass a new or empty folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise ValueError(
            f"--out {os.fspath(out)!r} is a non-empty folder that was not created by the quickstart (no {MARKER} "
            "file); pass a new or empty folder so nothing of yours is replaced"
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("created by python -m llava.quickstart; its data/, models/ and runs/ are replaced on the next run\n")
    for owned in OWNED:
        target = out / owned
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
    return out


def run_quickstart(out: str | Path, config: QuickstartConfig = QuickstartConfig()) -> list[RunResult]:
    """The whole quickstart into ``out``; prints the table and returns the results.

    ``config.projectors`` may contain ``all`` (see :func:`expand_projectors`). A projector that cannot be built
    on the quickstart's tower (e.g. a region method whose regions do not divide its grid) is skipped with its
    reason. The settings are checked first; then ``out`` is prepared by :func:`prepare_out` (``out/data``,
    ``out/models`` and ``out/runs`` are replaced only in a folder an earlier quickstart created).
    """
    projectors, skipped = expand_projectors(config.projectors or default_projectors(config.video), config.budget)
    validate_config(replace(config, projectors=tuple(projectors)))
    reducers: tuple[str, ...] = ()
    if config.reducers:
        reducers, notes = expand_reducers(config.reducers, llm_config(config), image_tokens(config))
        skipped.extend(notes)
    check_writable_folder(out, "--out")
    with disk_errors("--out", out):
        return _run(Path(out), config, projectors, skipped, reducers)


def _train_and_answer(projectors: Sequence[str], models: Models, data: DatasetFiles, config: QuickstartConfig, out: Path,
                      prompt_tokens: int, skipped: list[str]) -> list[RunResult]:
    """:func:`run_projector` for each projector; one that cannot run is a note in ``skipped``."""
    results = []
    for index, projector in enumerate(projectors, start=1):
        logger.info("quickstart [%d/%d] %s on %s: stage 1, stage 2, held-out answers", index, len(projectors), projector,
                    config.backbone)
        try:
            results.append(run_projector(projector, models, data, config, out / "runs" / projector, prompt_tokens))
        except ValueError as exc:  # one sentence from the projector's factory or plugin, e.g. an impossible budget
            logger.warning("skipping %s: %s", projector, exc)
            skipped.append(f"{projector}: {exc}")
    return results


def _reduce(reducers: Sequence[str], trained: Sequence[RunResult], models: Models, data: DatasetFiles, config: QuickstartConfig,
            prompt_tokens: int, skipped: list[str]) -> list[RunResult]:
    """:func:`run_reducer` for each reducer on the trained vanilla checkpoint; one that cannot run is a note in ``skipped``."""
    name = vanilla_projector([result.projector for result in trained])
    if reducers and name is None:
        skipped.extend(f"{reducer}: the vanilla checkpoint it runs on was not trained" for reducer in reducers)
        return []
    vanilla = next((result for result in trained if result.projector == name), None)
    results = []
    for index, reducer in enumerate(reducers, start=1):
        logger.info("quickstart reducer [%d/%d] %s on the trained %s checkpoint: held-out answers", index, len(reducers), reducer, name)
        try:
            results.append(run_reducer(reducer, vanilla, models, data, config, prompt_tokens))
        except ValueError as exc:  # one sentence from the reducer's plugin or the seam
            logger.warning("skipping %s: %s", reducer, exc)
            skipped.append(f"{name} + {reducer}: {exc}")
    return results


def _run(out: Path, config: QuickstartConfig, projectors: Sequence[str], skipped: list[str], reducers: Sequence[str] = ()) -> list[RunResult]:
    """The body of :func:`run_quickstart`, once the settings and ``out`` are checked."""
    out = prepare_out(out)
    started = time.perf_counter()
    if config.video:
        from .video import write_video_dataset

        data = write_video_dataset(
            out / "data", train_clips=config.train_scenes, test_questions=config.test_questions,
            turns_per_clip=config.turns_per_scene, size=config.image_size, seed=config.seed,
        )
    else:
        data = write_dataset(
            out / "data", train_scenes=config.train_scenes, test_questions=config.test_questions,
            turns_per_scene=config.turns_per_scene, image_size=config.image_size, seed=config.seed,
        )
    models = build_models(out / "models", config)
    prompt_tokens = mean_prompt_tokens(data, models.tokenizer, models.template)
    setup_seconds = time.perf_counter() - started
    trained = _train_and_answer(projectors, models, data, config, out, prompt_tokens, skipped)
    if not trained:
        raise ValueError(f"no projector could run: {'; '.join(skipped)}")
    results = trained + _reduce(reducers, trained, models, data, config, prompt_tokens, skipped)
    meta = {
        "config": asdict(config),
        "projectors": list(projectors),
        "reducers": list(reducers),
        "inputs": "video clips" if config.video else "images",
        "backbone": {"name": config.backbone, "description": resolve_backbone(config.backbone).description,
                     "template": models.template},
        "skipped": skipped,
        "setup_seconds": setup_seconds,
        "total_seconds": time.perf_counter() - started,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "prompt_tokens": prompt_tokens,
    }
    write_results(out / "results.json", results, meta)
    plot_results(out / "quickstart.png", results)
    try:
        plot_pareto(out / "pareto.png", comparison(results), xlabel="analytic prefill FLOPs per image")
    except ValueError as exc:  # e.g. no Acc. when vanilla scored 0 everywhere on a tiny run
        logger.warning("no pareto.png: %s", exc)
    print(f"backbone {config.backbone}: {resolve_backbone(config.backbone).description}; template {models.template}\n")
    print(format_table(results, skipped))
    if config.video:
        print("\n--video is a wiring check: every video step ran, but at this size no projector learns these questions "
              "(measured runs stay at or below chance), so this table compares nothing (docs/QUICKSTART.md)")
    print(f"\ntotal wall time {meta['total_seconds']:.0f} s; results in {out / 'results.json'}, figures {out / 'quickstart.png'}, "
          f"{out / 'pareto.png'}\n")
    checkpoints = [(result.projector, Path(result.checkpoint)) for result in trained]
    print(next_steps(checkpoints, data.images, data.questions, data.gold, models.template, out, video=config.video))
    return results


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llava.quickstart", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="outputs/quickstart", help="output folder (default: outputs/quickstart)")
    parser.add_argument("--reduced", action="store_true", help="less data and fewer epochs, same code path (CI)")
    parser.add_argument("--projectors", nargs="+", default=None, metavar="TYPE",
                        help=f"mm_projector_type values to compare, or '{ALL}' ({VANILLA_PROJECTOR} and every registered "
                             f"compressor at --budget) (default: {DEFAULT_WORDS})")
    parser.add_argument("--reducers", nargs="+", default=None, metavar="TYPE",
                        help=f"in-LLM reducer types (as the loaders' --reducer takes them), or "
                             f"'{ALL_REDUCERS}' (one type of each installed reducer plugin that fits the tiny LLM), run after training on "
                             f"the trained {VANILLA_PROJECTOR} checkpoint through model_vqa_loader --reducer, one table row each "
                             "(no training; default: none)")
    parser.add_argument("--backbone", choices=list(BACKBONES), default=DEFAULT_BACKBONE,
                        help="tiny vision tower × LLM pair: " + "; ".join(f"{b.name}: {b.description}" for b in BACKBONES.values())
                             + " (default %(default)s)")
    parser.add_argument("--video", action="store_true",
                        help="a wiring check of the video path: clips of moving shapes (questions about order and motion) instead "
                             "of still scenes; no projector learns them at this size; default projectors then: mlp2x_gelu and "
                             "each plugin's types at 16 tokens per frame (needs the 'video' extra)")
    parser.add_argument("--budget", type=int, default=QuickstartConfig.budget,
                        help="visual tokens per image for --projectors all (default %(default)s)")
    add_fast_flag(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> list[RunResult]:
    args = build_parser().parse_args(argv)
    setup_logging()
    if args.video:
        from llava.video import import_av

        import_av()  # one sentence naming the extra, before anything is written
        config = VIDEO_REDUCED if args.reduced else VIDEO
    else:
        config = REDUCED if args.reduced else QuickstartConfig()
    if args.budget < 1:
        raise ValueError(f"--budget must be a positive number of visual tokens, got {args.budget}")
    config = replace(config, budget=args.budget, backbone=args.backbone, fast=args.fast)
    if args.projectors:
        config = replace(config, projectors=tuple(args.projectors))
    if args.reducers:
        config = replace(config, reducers=tuple(args.reducers))
    return run_quickstart(args.out, config)


__all__ = [
    "MARKER", "QuickstartConfig", "REDUCED", "VIDEO", "VIDEO_REDUCED", "build_models", "default_projectors", "expand_projectors", "main",
    "prepare_out", "run_quickstart", "validate_config",
]
