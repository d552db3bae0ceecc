"""Stage-2 training step, vanilla (576 visual tokens) vs Braco-16, on the LLaVA-1.5-7B shape (issue 15's last target).

    python benchmarks/gpu_train_step.py --out outputs/gpu/gpu_train.json                  # on a GPU, bf16
    python benchmarks/gpu_train_step.py --device cpu --layers 1 --batch 1 --text-tokens 16 --steps 2 --out /tmp/t.json

What one step runs, with random weights of ``braco cost``'s ``llava-v1.5-7b`` preset (``RandomPipeline``): the
frozen CLIP-L/336 tower under ``no_grad``, the trainable projector (``mlp2x_gelu``; for Braco the coder in front),
the LLM with LoRA (r 128, alpha 256 on every linear layer of the decoder, as the v1.5 LoRA recipe) and gradient
checkpointing, the loss on the text tokens, backward, and an AdamW step on the trainable parameters. The text
length is a stand-in for a LLaVA-665K conversation (``--text-tokens``, default 120). Time per step is the median
of ``--steps`` CUDA-event-timed steps after two warm-up steps; the ratio is vanilla / Braco-16.
"""

from __future__ import annotations

import argparse
import datetime
from typing import Any

import torch

from braco_patch import BracoConfig
from braco_patch.cost.measure import braco_projector
from llava.cost.measure import MeasureOptions, RandomPipeline, describe_device, time_call
from llava.cost.presets import get_preset
from llava.outputs import guard_outputs, write_json
from llava.utils import cli_main

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def train_step_fn(pipe: RandomPipeline, alloc: BracoConfig | None, batch: int, text_tokens: int, lr: float = 2e-4):
    """A closure running one full training step for ``alloc`` (None = vanilla), and its LLM sequence length."""
    projector = braco_projector(pipe.spec, alloc, pipe.opts).train()
    for parameter in projector.parameters():
        parameter.requires_grad_(True)
    trainable = [p for p in projector.parameters()] + [p for p in pipe.llm.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=lr)
    device, dtype = pipe.opts.device, pipe.opts.dtype
    size = pipe.vision_config.image_size
    pixels = torch.randn(batch, 3, size, size, device=device, dtype=dtype)
    text = torch.randn(batch, text_tokens, pipe.llm_config.hidden_size, device=device, dtype=dtype) * 0.02
    visual_tokens = 576 if alloc is None else alloc.cutoff**2 + alloc.residual_tokens
    ignore = torch.full((batch, visual_tokens), -100, device=device)
    labels = torch.cat([ignore, torch.randint(0, pipe.llm_config.vocab_size, (batch, text_tokens), device=device)], dim=1)

    def step() -> None:
        with torch.no_grad():
            hidden = pipe.vision(pixel_values=pixels, output_hidden_states=True).hidden_states[pipe.spec.select_layer][:, 1:]
        embeds = torch.cat([projector(hidden), text], dim=1)
        loss = pipe.llm(inputs_embeds=embeds, labels=labels, use_cache=False).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step, visual_tokens + text_tokens


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default=None, help="default: bfloat16 on cuda, float32 on cpu")
    parser.add_argument("--batch", type=int, default=16, help="per-device batch (the v1.5 stage-2 recipe: 16)")
    parser.add_argument("--text-tokens", type=int, default=120)
    parser.add_argument("--layers", type=int, default=None, help="cap the LLM layers (CPU wiring check)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda needs a GPU (use --device cpu to check the wiring)")
    guard_outputs(files={"--out": args.out})  # before the measurements: a folder or unwritable --out fails now
    from peft import LoraConfig, get_peft_model

    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype or ("bfloat16" if args.device == "cuda" else "float32"))
    opts = MeasureOptions(device=device, dtype=dtype, warmup=2, iters=args.steps, llm_layers=args.layers)
    pipe = RandomPipeline(get_preset("llava-v1.5-7b"), opts)
    pipe.llm = get_peft_model(pipe.llm, LoraConfig(r=128, lora_alpha=256, lora_dropout=0.05, target_modules=LORA_TARGETS))
    pipe.llm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    pipe.llm.train()
    rows = []
    for label, alloc in (("vanilla (576 tokens)", None), ("Braco-16 (c3s7)", BracoConfig.from_budget(16))):
        step, length = train_step_fn(pipe, alloc, args.batch, args.text_tokens)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        timing = time_call(step, device, opts.warmup, opts.iters)
        peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
        rows.append({"variant": label, "llm_tokens": length, **timing, "peak_bytes": peak})
        print(f"{label:<22} LLM tokens {length:4d}  {timing['median_ms']:9.2f} ± {timing['std_ms']:.2f} ms/step"
              + (f"  peak {peak / 2**30:.1f} GiB" if peak else ""), flush=True)
    ratio = rows[0]["median_ms"] / rows[1]["median_ms"]
    print(f"vanilla / Braco-16: {ratio:.2f}x (target: >= 3x)")
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device": describe_device(device), "dtype": str(dtype).removeprefix("torch."), "batch": args.batch,
              "text_tokens": args.text_tokens, "llm_layers": args.layers or pipe.spec.llm.num_hidden_layers,
              "lora": {"r": 128, "alpha": 256, "targets": LORA_TARGETS}, "gradient_checkpointing": True,
              "rows": rows, "vanilla_over_braco16": ratio}
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
