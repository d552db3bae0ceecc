"""``braco cost --reducer NAME ...``: each in-LLM reducer's LLM prefill counted per decoder layer and, with
``--measure``, timed against the same prefill without it on one random-weight LLM (:mod:`llava.cost.reducer`,
:mod:`llava.cost.reducer_measure`)."""

from __future__ import annotations

import argparse
from typing import Any

from llava.cost.flops import CONVENTION
from llava.cost.presets import PipelineSpec

__all__ = ["format_reducer_measured", "run_reducers"]


def run_reducers(args: argparse.Namespace, spec: PipelineSpec) -> dict[str, Any]:
    """The per-layer table of every ``--reducer`` for every input of ``spec``; with ``--measure``, the measured table.

    Every flag is checked (and every reducer resolved and fitted to ``--layers``) before anything is printed.
    """
    from llava.cost.reducer import reducer_prefill
    from llava.plugin_api import LMDims

    if args.measure:
        _check_measure_flags(args)
    lm = LMDims.from_config(spec.llm)
    inputs = spec.input(args.input_tokens)
    tables = [reducer_prefill(name, lm, int(inp.label), args.prompt_tokens, count_attention=args.count_attention,
                              lm_head=args.lm_head) for inp in inputs for name in args.reducer]
    opts = plans = None
    if args.measure:  # every reducer resolved and fitted to --layers before anything is printed
        from llava.cost.reducer_measure import plan_reducers

        opts = _options(args)
        plans = plan_reducers(spec, list(args.reducer), opts, args.prompt_tokens, inputs,
                              count_attention=args.count_attention, lm_head=args.lm_head)
    print(f"FLOPs convention: {CONVENTION} (llava/cost/flops.py); LLM prefill of {spec.name} per decoder layer "
          f"({args.prompt_tokens} text tokens, attention scores {'counted' if args.count_attention else 'not counted'}, "
          f"LM head on {args.lm_head} positions; each layer at its own token count, never averaged)")
    for table in tables:
        print(f"\n{table.name} ({table.method}): {table.total / 1e12:.3f} TFLOPs vs {table.baseline / 1e12:.3f} without it "
              f"({table.total / table.baseline:.1%})")
        print("layer  image  tokens   GFLOPs  selection GFLOPs")
        for row in table.layers:
            print(f"{row.layer:5d}  {row.visual:5d}  {row.tokens:6d}  {row.flops / 1e9:7.2f}  {row.selection / 1e9:7.3f}")
    result: dict[str, Any] = {"pipeline_name": spec.name, "convention": CONVENTION, "reducers": [t.to_dict() for t in tables]}
    if plans is not None:
        result["measure"] = _measure(args, spec, inputs, opts, plans)
    return result


def _check_measure_flags(args: argparse.Namespace) -> None:
    """Refuse, in one sentence each, what the reducer measurement cannot run."""
    if args.fast != "none":
        raise ValueError(f"--fast {args.fast} cannot run an in-LLM reducer (the seam runs the layers eagerly); "
                         "use --fast none with --reducer --measure")
    if args.prompt_tokens < 1:
        raise ValueError(f"--measure with --reducer needs --prompt-tokens 1 or more (the reducers rank image tokens by "
                         f"the prompt's attention), got {args.prompt_tokens}")


def _options(args: argparse.Namespace) -> Any:
    import torch

    from llava.cost.measure import MeasureOptions
    from llava.devices import resolve_device, resolve_dtype

    device = torch.device(resolve_device(args.device))
    return MeasureOptions(device=device, dtype=resolve_dtype(args.dtype, device), warmup=args.warmup, iters=args.iters,
                          batch_sizes=tuple(args.batch_sizes), llm_layers=args.layers)


def _measure(args: argparse.Namespace, spec: PipelineSpec, inputs: Any, opts: Any, plans: Any) -> dict[str, Any]:
    import torch

    from llava.cost.measure import VALUES_NOTE, describe_device
    from llava.cost.reducer_measure import measure_reducers

    rows = measure_reducers(spec, plans, opts, args.prompt_tokens, inputs, lm_head=args.lm_head)
    layers = rows[0]["timed_layers"]
    header = {
        "device": describe_device(opts.device), "dtype": str(opts.dtype).removeprefix("torch."), "warmup": opts.warmup,
        "iters": opts.iters, "batch_sizes": list(opts.batch_sizes), "torch": torch.__version__,
        "llm_layers": f"{layers} of {spec.llm.num_hidden_layers}", "prompt_tokens": args.prompt_tokens,
        "layout": "per prompt: the image tokens, then the prompt tokens (all instruction tokens; the last is the prompt's last)",
        "lm_head": args.lm_head, "attention": "sdpa", "count_attention": args.count_attention, "note": VALUES_NOTE,
    }
    print("\n" + format_reducer_measured(rows, header))
    return {"header": header, "rows": rows}


def format_reducer_measured(rows: list[dict[str, Any]], header: dict[str, Any]) -> str:
    """The measured table: per input, batch and reducer, ms with and without it, their ratio and the analytic ratio."""
    scored = "counted" if header["count_attention"] else "not counted (as SDPA's are not profiled)"
    lines = [
        f"(r) measured LLM prefill with each reducer vs the same prefill without it (one random-weight LLM, the reducer "
        f"seam installed): {header['device']}, {header['dtype']}, {header['warmup']} warm-up + {header['iters']} timed "
        f"calls (median, std), torch {header['torch']}",
        f"    {header['note']}; LLM layers timed: {header['llm_layers']} (the first ones); {header['prompt_tokens']} "
        f"prompt tokens after the image tokens; LM head on {header['lm_head']} positions; attention: SDPA",
        f"    analytic ratio: the same timed layers, each at its own token count, attention scores {scored}, each "
        "selection's explicit attention rows counted; batch = prompts per call",
        f"{'input':>6} {'batch':>5} {'reducer':<22} {'with ms':>9} {'std':>7} {'without ms':>10} {'std':>7} "
        f"{'measured':>8} {'analytic':>8} {'peak MiB with/without':>22}  steps not run (beyond the timed layers)",
    ]
    for r in rows:
        with_row, without = r["with"], r["without"]
        head = f"{r['input']:>6} {r['batch']:>5} {r['reducer']:<22}"
        if r["measured_ratio"] is None:
            lines.append(f"{head} {with_row['status']:>9} {'':>7} {without['status']:>10}")
            continue
        peak = f"{with_row['peak_bytes'] / 2**20:.1f}/{without['peak_bytes'] / 2**20:.1f}"
        skipped = ", ".join(f"layer {layer}" for layer in r["not_run_layers"]) or "-"
        lines.append(f"{head} {with_row['median_ms']:>9.2f} {with_row['std_ms']:>7.2f} {without['median_ms']:>10.2f} "
                     f"{without['std_ms']:>7.2f} {r['measured_ratio']:>8.1%} {r['analytic_ratio']:>8.1%} {peak:>22}  {skipped}")
    return "\n".join(lines)
