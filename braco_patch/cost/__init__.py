"""``braco cost``: Braco's costs on llava's pipeline cost engine (:mod:`llava.cost`), next to the paper's figures.

- :mod:`.coder_flops` — the coder per paper step, official computation and ours (what Braco's cost model counts with);
- :mod:`.pipeline` — vanilla vs each budget through a whole prefill (paper Table 1);
- :mod:`.report` — the tables; :mod:`.by_type` — tables over methods and projector types, every row asked of its
  plugin's cost model, and the paper's module-cost table;
- :mod:`.measure` — the coder and the prefill measured; :mod:`.paper` — the paper's numbers; :mod:`.cli` — the command.

This package is a seam: it runs Braco inside llava's pipeline, so it imports ``llava`` (DESIGN "Rules").
"""
