"""``braco cost``: analytic (and optionally measured) cost of a LLaVA-style prefill with Braco.

    braco cost [--preset llava-v1.5-7b | --config PATH [--vision-config PATH]] [--input-tokens N]
               [--budgets 4 9 16 25 | --projector braco_c3s7 mlp2x_gelu TYPE ... | --projector all] [--prompt-tokens 52]
               [--table pipeline|compressors] [--question-tokens 7] [--frames T]
               [--count-attention | --no-count-attention] [--lm-head all|last] [--vision-layers all|selected|N]
               [--json FILE]
               [--measure [--device cpu|cuda] [--dtype D] [--warmup 20] [--iters 100] [--batch-sizes 1 2 4 ...]
                [--layers N] [--fast none|compile|cudagraph] [--parts boundary pipeline]]
    braco cost --reducer NAME ... [--preset P | --config PATH] [--prompt-tokens 52] [--count-attention] [--lm-head all|last]
               [--json FILE] [--measure [--device D] [--dtype D] [--warmup N] [--iters N] [--batch-sizes ...] [--layers N]]

Prints (a) full-pipeline prefill FLOPs of vanilla vs each budget (paper Table 1), (b) the compressor per
paper step, official computation next to ours, (c) the pre-/post-projector boundary; with ``--projector``, (g)
every projector type's module and pipeline FLOPs, asked of its plugin (:mod:`llava.cost.module`; ``all`` = every
registered method's types at ``--budgets``, refused in one sentence when no method plugin is registered); with ``--measure``,
(d) measured compressor latency/memory/FLOPs, (e) measured full-pipeline prefill and (h) each type as built.
``--reducer NAME ...`` prints instead each in-LLM reducer's LLM prefill per decoder layer and, with ``--measure``,
(r) the prefill timed with each reducer against the same prefill without it (:mod:`.reducers`).
``--frames T`` makes tables (a) and (g) one video's prefill: T frames through the tower, compressor and projector,
the LLM over their tokens (:mod:`llava.cost.video`). ``--table compressors`` prints (f) instead: the paper's
module-cost table, method by method (:mod:`.by_type`). The defaults are the accounting that reproduces the paper (see
:mod:`braco_patch.cost.pipeline`); the engine is :mod:`llava.cost`. Also ``python -m braco_patch.cost``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

# Light imports only: --help and a bad flag must answer without loading torch or transformers (the work below
# imports them where it runs).
from llava.capture import FAST_MODES
from llava.cost.flops import CONVENTION
from llava.cost.module import ALL
from llava.cost.pipeline import Accounting, cost_setting
from llava.cost.presets import PipelineSpec, get_preset, list_presets, load_spec
from llava.outputs import guard_outputs, write_text

from ..argtypes import non_negative_int, positive_int

if TYPE_CHECKING:
    from llava.cost.video import Video

    from ..config import BracoConfig

__all__ = ["main", "run", "build_parser"]

logger = logging.getLogger(__name__)


def _vision_layers(value: str) -> str | int:
    if value in ("all", "selected"):
        return value
    try:
        layers = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'all', 'selected' or a layer count, got {value!r}") from None
    if layers < 1:
        raise argparse.ArgumentTypeError(f"vision layer count must be >= 1, got {layers}")
    return layers


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="braco cost", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_argument_group("pipeline")
    src.add_argument("--preset", default=None, help=f"one of {list_presets()} (default llava-v1.5-7b)")
    src.add_argument("--config", default=None, help="local config.json (LLaVA-style, transformers LlavaConfig, or an LM config)")
    src.add_argument("--vision-config", "--vision_config", default=None, help="vision tower config.json or folder (CLIP/SigLIP)")
    src.add_argument("--input-tokens", "--input_tokens", default=None, help="only this input setting (e.g. 729, 1024, 3645)")
    src.add_argument("--budgets", type=positive_int, nargs="+", default=[4, 9, 16, 25], help="total budgets K per view")
    src.add_argument("--projector", nargs="+", default=None,
                     help="projector types instead of --budgets: Braco allocations (braco_c3s7, c4s9_idct) feed tables (a)-(c); "
                          "every type (any registered one, e.g. mlp2x_gelu, or 'all' = every plugin's types at --budgets) gets table (g)")
    src.add_argument("--reducer", nargs="+", default=None, metavar="NAME",
                     help="in-LLM reducer types (e.g. fastv_k2_r50, pyramiddrop_s8_r50): the LLM prefill layer by layer; "
                          "with --measure, timed with each reducer and without it on one random-weight LLM")
    src.add_argument("--table", choices=["pipeline", "compressors"], default="pipeline",
                     help="pipeline: tables (a)-(c) (+ (g) for --projector); compressors: the paper's module-cost table "
                          "(tab:main_compressor_cost) at each of --budgets, method by method")
    src.add_argument("--frames", type=positive_int, default=None,
                     help="cost one video of T frames instead of one image (LLaVA-NeXT / OneVision): tower, compressor "
                          "and projector once per frame, the LLM over every frame's tokens (NeXT's 2-D pool on the "
                          "vanilla grid; a --config's mm_spatial_pool_* / mm_newline_position keys) + the prompt; "
                          "analytic only (not with --measure or --table compressors)")
    src.add_argument("--question-tokens", "--question_tokens", type=non_negative_int, default=7,
                     help="question tokens of a prompt-conditioned module's LLM pass (QueCC; default %(default)s)")
    acc = p.add_argument_group("accounting (defaults reproduce the paper)")
    acc.add_argument("--prompt-tokens", "--prompt_tokens", type=int, default=Accounting.prompt_tokens,
                     help="text tokens in the prompt besides the visual tokens (default %(default)s)")
    acc.add_argument("--count-attention", "--count_attention", action=argparse.BooleanOptionalAction, default=False,
                     help="count attention-score FLOPs (QK^T, AV) in the tower and the LLM (default: no)")
    acc.add_argument("--lm-head", "--lm_head", choices=["all", "last"], default="all", help="logits for all positions or the last")
    acc.add_argument("--vision-layers", "--vision_layers", type=_vision_layers, default="all",
                     help="tower layers counted: all (HF runs every layer), selected (up to the feature layer), or N")
    p.add_argument("--json", default=None, help="also write every table (and measurements) to this file")
    m = p.add_argument_group("measurement")
    m.add_argument("--measure", action="store_true", help="also measure latency, peak memory and profiler FLOPs")
    m.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda if available, else cpu")
    m.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default=None, help="default: float16 on cuda, float32 on cpu")
    m.add_argument("--warmup", type=int, default=20)
    m.add_argument("--iters", type=positive_int, default=100)
    m.add_argument("--batch-sizes", "--batch_sizes", type=positive_int, nargs="+", default=[1])
    m.add_argument("--layers", type=positive_int, default=None, help="cap the LLM at N layers (a CPU-sized run); reported")
    m.add_argument("--fast", choices=FAST_MODES, default="none", help="fast path for the coder and the pipeline")
    m.add_argument("--compile-mode", "--compile_mode", default=None, help="override the torch.compile mode of --fast compile")
    m.add_argument("--parts", nargs="+", choices=["boundary", "pipeline"], default=["boundary", "pipeline"])
    return p


def _spec(args: argparse.Namespace) -> PipelineSpec:
    if args.config is not None and args.preset is not None:
        raise ValueError("pass either --preset or --config, not both")
    if args.config is not None:
        return load_spec(args.config, args.vision_config)
    if args.vision_config is not None:
        raise ValueError("--vision-config needs --config (an LLM config.json)")
    return get_preset(args.preset or "llava-v1.5-7b")


def _braco_allocation(name: str) -> BracoConfig | None:
    """The allocation a Braco name means (``braco_c3s7``, ``c4s9_idct``, ``braco_k16``), else ``None``."""
    from ..config import BracoConfig

    try:
        return BracoConfig.from_name(name)
    except ValueError:
        return None


def _allocations(args: argparse.Namespace, spec: PipelineSpec, inputs) -> list[BracoConfig]:
    from ..config import BracoConfig
    from .coder_flops import check_allocation

    if args.projector:
        allocations = [a for a in map(_braco_allocation, _types(args, spec)) if a is not None]
    else:
        allocations = [BracoConfig.from_budget(k) for k in args.budgets]
    for inp in inputs:
        for alloc in allocations:
            what = f"projector {alloc.name}" if args.projector else f"budget {alloc.output_tokens} ({alloc.name})"
            check_allocation(alloc, spec.grid(inp), what)
    return allocations


def _types(args: argparse.Namespace, spec: PipelineSpec | None = None) -> list[str]:
    """``--projector`` with ``all`` expanded at ``--budgets`` (empty without ``--projector``); with ``spec``,
    the types ``all`` gives that do not fit its grid are left out."""
    if not args.projector:
        return []
    from llava.cost.module import expand_types

    from ..config import NAME_PATTERN, PROJECTOR_PREFIX

    # a bare Braco allocation (c3s7, k16) is the projector type braco_c3s7 / braco_k16
    names = [f"{PROJECTOR_PREFIX}{name}" if NAME_PATTERN.fullmatch(name) else name for name in args.projector]
    return expand_types(names, args.budgets, cost_setting(spec) if spec is not None else None)


def _checkpoint_config(args: argparse.Namespace) -> SimpleNamespace | None:
    """The ``--config`` file's values (its projector type is costed with its own stored settings)."""
    if args.config is None:
        return None
    path = Path(args.config)
    return SimpleNamespace(**json.loads((path / "config.json" if path.is_dir() else path).read_text()))


def _run_compressors(args: argparse.Namespace, spec: PipelineSpec) -> dict[str, Any]:
    from .by_type import compressors_table, format_compressors

    setting = cost_setting(spec, question_tokens=args.question_tokens, count_attention=args.count_attention)
    print(f"FLOPs convention: {CONVENTION} (llava/cost/flops.py)")
    tables = {}
    for budget in args.budgets:
        rows = compressors_table(setting, budget)
        print(format_compressors(rows, setting, budget), end="\n\n")
        tables[str(budget)] = rows
    return {"pipeline_name": spec.name, "convention": CONVENTION, "compressors": tables}


def _check_layer_counts(args: argparse.Namespace, spec: PipelineSpec) -> None:
    """Refuse layer counts beyond the pipeline's (they used to be clamped silently), and negative counts."""
    limits = (("--vision-layers", args.vision_layers, spec.vision.num_hidden_layers, "vision tower"),
              ("--layers", args.layers, spec.llm.num_hidden_layers, "LLM"))
    for flag, value, most, what in limits:
        if isinstance(value, int) and value > most:
            raise ValueError(f"{flag} {value} exceeds the {most} layers of the {what} of {spec.name}; accepted: 1 to {most}")
    if args.prompt_tokens < 0:
        raise ValueError(f"--prompt-tokens must be >= 0, got {args.prompt_tokens}")
    if args.warmup < 0:
        raise ValueError(f"--warmup must be >= 0, got {args.warmup}")


def _check_frames(args: argparse.Namespace) -> None:
    """``--frames`` costs the pipeline tables analytically; refuse what it does not cover rather than ignore it."""
    if args.frames is None:
        return
    if args.table == "compressors":
        raise ValueError("--frames costs the pipeline tables; --table compressors is the per-image module table, so drop one of them")
    if args.measure:
        raise ValueError("--frames is analytic only (--measure times one image per row, without NeXT's 2-D pool); "
                         "run --frames and --measure separately")


def _video(args: argparse.Namespace, spec: PipelineSpec, inputs) -> Video | None:
    """The video ``--frames`` asks for, laid out by ``--config``'s video keys (NeXT's defaults for a preset)."""
    if args.frames is None:
        return None
    from llava.cost.video import video_setting

    return video_setting(args.frames, spec.grid(inputs[0]), _checkpoint_config(args))


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Build every table (and measurement) for parsed ``args``; prints them; returns the JSON-able result."""
    import torch

    from llava.cost.video import frame_inputs
    from llava.devices import resolve_device

    from .by_type import format_reducers, format_types, reducers_table, types_table
    from .report import boundary_table, format_boundary, format_pipeline, format_stages, pipeline_table, stage_table

    _check_frames(args)
    if args.reducer:
        if args.projector:
            raise ValueError("--reducer counts the reducer on the vanilla prefill and --projector is not used with it; drop "
                             "one (--projector all lists every reducer too, and compare --checkpoint NAME=DIR --reducer "
                             "NAME=TYPE counts a reducer on a compressor's checkpoint)")
        return _run_reducers(args, _spec(args))
    if args.table == "compressors":
        return _run_compressors(args, _spec(args))
    if args.measure:  # refuse what this machine cannot run before printing anything
        if torch.device(resolve_device(args.device)).type != "cuda" and args.fast == "cudagraph":
            raise ValueError("--fast cudagraph needs --device cuda; use --fast compile or none on cpu")
    spec = _spec(args)
    _check_layer_counts(args, spec)
    inputs = spec.input(args.input_tokens) if args.frames is None else frame_inputs(spec, args.input_tokens)
    video = _video(args, spec, inputs)
    allocations = _allocations(args, spec, inputs)
    cap = args.vision_layers if isinstance(args.vision_layers, int) else None
    acc = Accounting(prompt_tokens=args.prompt_tokens, count_attention=args.count_attention, lm_head=args.lm_head,
                     vision_layers="all" if cap else args.vision_layers)
    result: dict[str, Any] = {
        "pipeline_name": spec.name, "description": spec.description, "accounting": acc.to_dict(),
        "vision_layer_cap": cap, "convention": CONVENTION,
        "pipeline": pipeline_table(spec, inputs, allocations, acc, vision_layers=cap, video=video),
        "stages": stage_table(spec, inputs, allocations),
        "boundary": boundary_table(spec, inputs, allocations),
    }
    if video is not None:
        result["frames"] = video.frames
        result["video"] = video.describe()
    types = _types(args, spec)
    setting = cost_setting(spec, question_tokens=args.question_tokens, count_attention=args.count_attention, computation=acc.computation)
    if args.projector:  # before printing: an unknown or unfitting type is refused with no tables above it
        result["types"] = types_table(spec, types, acc, setting, _checkpoint_config(args), video)
    if ALL in (args.projector or ()) and video is None:  # every method: the in-LLM ones too
        result["reducers"] = reducers_table(spec, acc, result["types"][0])
    print(f"FLOPs convention: {CONVENTION} (llava/cost/flops.py)")
    print(format_pipeline(result["pipeline"], spec, inputs, acc, video), end="\n\n")
    print(format_stages(result["stages"]), end="\n\n")
    print(format_boundary(result["boundary"], spec))
    if args.projector:
        print("\n" + format_types(result["types"], spec, acc, video))
    if result.get("reducers"):
        print("\n" + format_reducers(result["reducers"], spec, result["types"][0]["type"]))
    elif ALL in (args.projector or ()) and video is not None:
        print("\n(j) in-LLM reducers are counted on one image's prefill; drop --frames to list them")
    if args.measure:
        result["measure"] = _measure(args, spec, inputs, allocations, acc, cap)
        if args.projector:
            result["measure"]["types"] = _measure_types(args, spec, types, setting, acc)
    return result


def _run_reducers(args: argparse.Namespace, spec: PipelineSpec) -> dict[str, Any]:
    """``--reducer``: each reducer's LLM prefill per decoder layer (and, with ``--measure``, timed with and without it)."""
    from .reducers import run_reducers

    _check_layer_counts(args, spec)
    return run_reducers(args, spec)


def _measure_types(args: argparse.Namespace, spec: PipelineSpec, types: list[str], setting, acc: Accounting) -> dict[str, Any]:
    import torch

    from llava.cost.measure import MeasureOptions
    from llava.cost.measure_types import measure_pipeline_types, measure_types
    from llava.devices import resolve_device, resolve_dtype

    device = torch.device(resolve_device(args.device))
    cap = args.vision_layers if isinstance(args.vision_layers, int) else None
    opts = MeasureOptions(device=device, dtype=resolve_dtype(args.dtype, device), warmup=max(args.warmup, 0),
                                  iters=args.iters, batch_sizes=tuple(args.batch_sizes), llm_layers=args.layers, vision_layers=cap)
    # the measured call runs our coder, so the analytic figure next to it is our computation
    with_vanilla = list(dict.fromkeys([f"mlp{spec.projector_depth}x_gelu", *types]))
    ours = dataclasses.replace(setting, computation="ours")
    out: dict[str, Any] = {}
    if "boundary" in args.parts:
        out["module"] = measure_types(spec, with_vanilla, ours, opts)
        print(_format_measured(out["module"], "(h) projector types as built (whole module: the post-projector boundary); "
                                              "a prompt-conditioned module's LLM pass is not run, its analytic count includes it"))
    if "pipeline" in args.parts:
        out["pipeline"] = measure_pipeline_types(spec, with_vanilla, acc, ours, opts)
        print(_format_measured(out["pipeline"], "(i) full-pipeline prefill per projector type (analytic: same capped layers, "
                                                "attention scores not counted, our computation)"))
    return out


def _measure(args, spec, inputs, allocations, acc, vision_cap) -> dict[str, Any]:
    import torch

    from llava.cost import measure as engine
    from llava.devices import resolve_device, resolve_dtype

    from . import measure

    device = torch.device(resolve_device(args.device))
    opts = engine.MeasureOptions(
        device=device, dtype=resolve_dtype(args.dtype, device), warmup=args.warmup, iters=args.iters,
        batch_sizes=tuple(args.batch_sizes), llm_layers=args.layers, vision_layers=vision_cap, fast=args.fast,
        compile_mode=args.compile_mode,
    )
    llm_layers = min(args.layers or spec.llm.num_hidden_layers, spec.llm.num_hidden_layers)
    vision_layers = min(vision_cap or spec.vision.num_hidden_layers, spec.vision.num_hidden_layers)
    header = {
        "device": engine.describe_device(device), "dtype": str(opts.dtype).removeprefix("torch."), "warmup": opts.warmup,
        "iters": opts.iters, "batch_sizes": list(opts.batch_sizes), "fast": opts.fast, "torch": torch.__version__,
        "llm_layers": f"{llm_layers} of {spec.llm.num_hidden_layers}", "vision_layers": f"{vision_layers} of {spec.vision.num_hidden_layers}",
        "note": engine.VALUES_NOTE,
    }
    print(f"\nmeasured on {header['device']}, {header['dtype']}, {opts.warmup} warm-up + {opts.iters} timed calls "
          f"(median, std), fast path: {opts.fast}, torch {torch.__version__}")
    print(f"    {engine.VALUES_NOTE}; LLM layers {header['llm_layers']}, vision layers {header['vision_layers']}")
    out: dict[str, Any] = {"header": header}
    if "boundary" in args.parts:
        out["boundary"] = measure.measure_boundary(spec, inputs, allocations, opts)
        print(_format_measured(out["boundary"], "(d) compressor boundary (one view)"))
    if "pipeline" in args.parts:
        out["pipeline"] = measure.measure_pipeline(spec, inputs, allocations, acc, opts)
        print(_format_measured(out["pipeline"], "(e) full-pipeline prefill (analytic: same capped layers, attention "
                                                "scores not counted, as the profiler does not count SDPA)"))
    return out


def _format_measured(rows: list[dict[str, Any]], title: str) -> str:
    from .report import unit_for

    scale, unit = unit_for(r["analytic"] for r in rows)
    lines = [title, f"{'batch':>5} {'variant':<34} {'bound.':>6} {'median ms':>10} {'std ms':>8} {'peak MiB':>9} "
                    f"{'prof. mm ' + unit:>10} {'anal. mm ' + unit:>10} {'prof. all ' + unit:>11} {'analytic ' + unit:>11}"]
    for r in rows:
        head = f"{r['batch']:>5} {r['variant']:<34} {r.get('boundary', '-'):>6}"
        if r.get("status") != "ok":
            lines.append(f"{head} {r.get('status', '?'):>10}")
            continue
        lines.append(
            f"{head} {r['median_ms']:>10.3f} {r['std_ms']:>8.3f} {r['peak_bytes'] / 2**20:>9.3f} "
            f"{r['profiler_matmul'] / scale:>10.4f} {r['analytic_matmul'] / scale:>10.4f} {r['profiler_total'] / scale:>11.4f} "
            f"{r['analytic'] / scale:>11.4f}"
            + (f"  |fast-eager| {r['max_abs_diff']:.2g}" if "max_abs_diff" in r else "")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse ``argv``, print the tables and return the result; a user error is one sentence on stderr, exit code 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.json:  # before any work: an unwritable --json must not cost a long measurement
            guard_outputs(inputs={"--config": args.config, "--vision-config": args.vision_config}, files={"--json": args.json})
        result = run(args)
        if args.json:
            write_text(args.json, json.dumps(result, indent=2, default=str))
            print(f"\nwrote {args.json}")
    except ValueError as exc:
        print(f"braco cost: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    return result


if __name__ == "__main__":
    main()
