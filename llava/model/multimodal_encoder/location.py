"""Where the vision tower a checkpoint names lives: the one rule every tower loader uses.

``mm_vision_tower`` (or NeXT's ``vision_tower``) is a hub name or a local folder. Upstream LLaVA reads a relative
folder from the working directory, so a checkpoint trained with ``--vision_tower towers/clip`` loads only from the
folder it was trained in. The rule here keeps that meaning and adds one fallback:

1. ``~`` is expanded; an absolute path, or a relative one that is a folder from the working directory, is used
   as it is (upstream's meaning);
2. otherwise a relative path that is a folder when read from the checkpoint's own folder is used from there, so
   a checkpoint that names its tower relative to itself (the quickstart's do: ``../../../models/clip-tiny``)
   loads from any working directory and keeps loading when it is moved together with its tower;
3. anything else is returned unchanged: a hub name (``openai/clip-vit-large-patch14-336``) keeps its meaning, and
   a missing folder is named by the tower builder.

When both 1 and 2 find a folder and they differ, the working directory's wins (as upstream) with a warning.
"""

from __future__ import annotations

import logging
import os
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["TOWER_KEYS", "config_tower_path", "resolve_tower_path"]

#: The config keys that name a tower, in the order they are read.
TOWER_KEYS = ("mm_vision_tower", "vision_tower")


def resolve_tower_path(name: str | os.PathLike[str], checkpoint: str | os.PathLike[str] | None = None) -> str:
    """The tower ``name`` as the loaders read it (see the module docstring for the rule).

    Args:
        name: ``mm_vision_tower`` as stored: a hub name, or an absolute or relative folder.
        checkpoint: The checkpoint folder (or its ``config.json``) that names the tower; ``None`` when the name
            comes from the command line (training's ``--vision_tower``), which is read from the working directory.

    Returns:
        A folder that exists (as given when found from the working directory, else absolute), or ``name``
        unchanged (``~`` expanded).
    """
    name = os.path.expanduser(os.fspath(name))
    if os.path.isabs(name) or checkpoint is None:
        return name
    folder = os.fspath(checkpoint)
    if os.path.isfile(folder):
        folder = os.path.dirname(folder) or "."
    beside = os.path.abspath(os.path.join(folder, name))
    if os.path.isdir(name):
        if os.path.isdir(beside) and os.path.realpath(beside) != os.path.realpath(name):
            logger.warning("vision tower %r exists both in the working directory and beside the checkpoint %s; using the "
                           "working directory's (%s), as upstream LLaVA does", name, folder, os.path.abspath(name))
        return name
    return beside if os.path.isdir(beside) else name


def config_tower_path(config: Any) -> str | None:
    """The tower a model config or training arguments name, resolved by :func:`resolve_tower_path`.

    A config read from a local checkpoint folder knows that folder (transformers' ``name_or_path``); training
    arguments do not, so their ``vision_tower`` is read from the working directory only.
    """
    name = next((getattr(config, key, None) for key in TOWER_KEYS if getattr(config, key, None)), None)
    if not name:
        return None
    source = getattr(config, "name_or_path", None)
    return resolve_tower_path(str(name), source if source and os.path.isdir(str(source)) else None)
