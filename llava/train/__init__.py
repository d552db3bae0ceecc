"""LLaVA training: the two-stage recipe (projector pre-training, then instruction tuning) on the HF ``Trainer``.

Entry points: ``llava/train/train.py`` and ``llava/train/train_mem.py`` (flash-attention-2 when installed),
run as upstream runs them (``deepspeed llava/train/train_mem.py --deepspeed ./scripts/zero2.json ...``) or
as ``python -m llava.train.train``. This package module imports nothing, so that projector plugins can
register training callbacks (:mod:`llava.train.train_callbacks`) without pulling in the trainer.
"""
