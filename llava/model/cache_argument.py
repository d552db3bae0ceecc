"""The key/value cache argument's name in the installed transformers.

transformers 5.24 renamed the causal LMs' ``past_key_values`` argument (and output field) to ``cache``; the old
name is accepted with a deprecation warning until 5.40, when it goes. The LLaVA models keep upstream's
``past_key_values`` in their own ``forward`` (users and LLaVA-NeXT's code pass it), accept ``cache`` as transformers'
``generate`` now does, and hand the cache on under whichever name the language model's ``forward`` declares.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, MutableMapping
from typing import Any


@functools.cache
def cache_argument(forward: Callable[..., Any]) -> str:
    """``"cache"`` when ``forward`` (a model class's unbound ``forward``) declares it, else ``"past_key_values"``."""
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def take_cache(past_key_values: Any, kwargs: MutableMapping[str, Any]) -> Any:
    """The cache a caller passed as ``past_key_values`` or as ``cache`` (removed from ``kwargs``).

    Raises:
        ValueError: If both name a cache.
    """
    cache = kwargs.pop("cache", None)
    if cache is None:
        return past_key_values
    if past_key_values is not None:
        raise ValueError("pass the key/value cache once, as past_key_values or as cache, not both")
    return cache
