"""A prompt layout shared by the reducer tests: prefix, image, instruction."""

import torch


def prompt_masks(batch: int, prefix: int, n_visual: int, n_text: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Bool ``visual`` and ``text`` ``[batch, prefix + n_visual + n_text]``: the image after ``prefix`` tokens,
    the instruction after the image."""
    t = prefix + n_visual + n_text
    visual = torch.zeros(batch, t, dtype=torch.bool)
    visual[:, prefix : prefix + n_visual] = True
    text = torch.zeros(batch, t, dtype=torch.bool)
    text[:, prefix + n_visual :] = True
    return visual, text
