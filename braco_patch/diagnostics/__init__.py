"""Compressibility and learnability diagnostics, and the label-free coordinate calibration (paper §3.2, App. A–I).

- :mod:`.data`: image folders, labelled sets, seeded resamples and splits;
- :mod:`.tower`: frozen CLIP/SigLIP (or a LLaVA checkpoint's ``mm_vision_tower``) patch-token features;
- :mod:`.stats`: the token-axis second moment ``M = E[X Xᵀ]``, streamed;
- :mod:`.energy`: energy retention ``E(B; S)`` under structured and magnitude truncation, energy maps;
- :mod:`.readability`: readability ``R(B; S)``, ``C = λE + (1−λ)R`` and the linear-probe protocol;
- :mod:`.learnability`: ``L_st``, ``L_geo``, ``L_learn``, ``Δ_st``, ``ρ_C`` and the ``K_b*`` crossover scan;
- :mod:`.report`: JSON/CSV/PNG outputs; :mod:`.commands`: ``braco diagnose`` and ``braco calibrate``.

Nothing here imports ``llava``.
"""

from .energy import ALL_BASES, FIXED_BASES, energy_diagnostics, energy_retention
from .learnability import (
                           DEFAULT_BETA,
                           DEFAULT_GAMMA,
                           coordinate_scores,
                           crossover_budget,
                           crossover_scan,
                           geo_penalty,
                           learn_objective,
                           stat_penalty,
                           summarize_calibration,
)
from .readability import DEFAULT_LAMBDA, compressibility, readability

__all__ = ["ALL_BASES", "FIXED_BASES", "energy_diagnostics", "energy_retention", "DEFAULT_BETA", "DEFAULT_GAMMA",
           "DEFAULT_LAMBDA", "coordinate_scores", "crossover_budget", "crossover_scan", "geo_penalty", "learn_objective",
           "stat_penalty", "summarize_calibration", "compressibility", "readability"]
