"""The quickstart: train and evaluate a tiny LLaVA with and without a visual-token compressor on a CPU, in minutes, with no download.

``python -m llava.quickstart --out outputs/quickstart`` (or ``make quickstart``):

1. :mod:`.scenes` draws a visual-QA dataset of synthetic scenes with known answers;
2. :mod:`.run` builds a tiny LLaVA for ``--backbone`` (:mod:`.backbones`: CLIP + LLaMA, or SigLIP + Qwen2; a
   locally trained tokenizer) with :mod:`llava.testing.tiny`, trains stage 1 and stage 2 through ``llava.train.train`` for each projector and
   answers the held-out questions with ``llava.eval.model_vqa_loader``;
3. :mod:`.report` scores the answers and writes the table, ``results.json`` and ``quickstart.png``.

``--reduced`` runs the same code on less data (for CI); ``--reducers`` adds the in-LLM reducers on the trained vanilla
checkpoint (:mod:`.reducers`).
"""
