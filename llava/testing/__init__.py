"""Tiny towers, language models, tokenizers and whole LLaVA checkpoints for tests and the quickstart.

They are saved to folders and loaded back through the same code a user runs on released weights
(``load_pretrained_model``, ``from_pretrained``); nothing here is used by the model at run time.
"""
