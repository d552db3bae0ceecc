"""The paper's published benchmark scores (reference data, no logic), offered to ``llava.eval.summarize
--baseline`` and ``llava.eval.compare --vanilla`` by name through the plugin declaration."""

from __future__ import annotations

#: Table 1, Vanilla LLaVA-v1.5-7B with all 576 visual tokens (the denominator of the paper's Acc.).
PAPER_VANILLA: dict[str, float] = {
    "gqa": 62.9, "mmbench": 65.5, "mmbench_cn": 60.7, "mme": 1785.0,
    "pope": 85.7, "sqa": 69.7, "textvqa": 58.0, "mmvet": 32.8,
}

#: Names a user passes for the rows above.
REFERENCE_SCORES: dict[str, dict[str, float]] = {"paper-vanilla": PAPER_VANILLA}

__all__ = ["PAPER_VANILLA", "REFERENCE_SCORES"]
