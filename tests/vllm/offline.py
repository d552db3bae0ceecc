"""Greedy tokens of prompts with images through vLLM's offline ``LLM`` (run as a script by the vLLM check, in its own
process: vLLM starts its engine in a spawned process, hence the ``__main__`` guard).

    python tests/vllm/offline.py CHECKPOINT REQUESTS.json OUT.json

``REQUESTS.json``: ``{"max_tokens": N, "requests": [{"prompt": text, "images": [path, ...]}, ...]}``. ``OUT.json``:
``{"single": [[ids], ...], "batched": [[ids], ...]}``: each request alone, then all of them in one ``generate`` call.
"""

from __future__ import annotations

import json
import sys


def main(checkpoint: str, requests_file: str, out_file: str) -> None:
    from PIL import Image
    from vllm import LLM, SamplingParams

    spec = json.loads(open(requests_file, encoding="utf-8").read())
    inputs = [
        {"prompt": request["prompt"], "multi_modal_data": {"image": [Image.open(path).convert("RGB") for path in request["images"]]}}
        for request in spec["requests"]
    ]
    llm = LLM(model=checkpoint, dtype="float32", max_model_len=512, max_num_seqs=8, seed=0,
              limit_mm_per_prompt={"image": max(len(request["images"]) for request in spec["requests"])})
    sampling = SamplingParams(temperature=0.0, max_tokens=spec["max_tokens"])
    single = [list(llm.generate([one], sampling, use_tqdm=False)[0].outputs[0].token_ids) for one in inputs]
    batched = [list(output.outputs[0].token_ids) for output in llm.generate(inputs, sampling, use_tqdm=False)]
    with open(out_file, "w", encoding="utf-8") as handle:
        json.dump({"single": single, "batched": batched}, handle)


if __name__ == "__main__":
    main(*sys.argv[1:4])
