"""Evaluation: benchmark loaders (``model_vqa*``), converters, scorers and ``run_llava``."""
