"""Every registered projector type, driven by the registry (each type's declared examples), through the real path:
a tiny checkpoint saved with it, loaded by ``load_pretrained_model``, images encoded by the model.

For each example: the saved weights load strictly and ``config.json`` alone rebuilds the same module (round trip);
a batch of three images gives what three batches of one give; the token count is what its plugin's cost model says;
and what the module needs from the model was resolved when it was built.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from llava.cost.flops import LMDims
from llava.cost.module import CostSetting, module_cost
from llava.mm_utils import get_model_name_from_path
from llava.model.builder import load_pretrained_model
from llava.model.multimodal_projector.builder import build_vision_projector
from llava.model.multimodal_projector.plugins import ModelNeeds, plugin_for, projector_needs
from llava.testing.registry import registered_examples

#: The width of the session's tiny CLIP tower (tests/conftest.py's ``tiny_tower_dir``).
TOWER_WIDTH = 32


@pytest.fixture(scope="module")
def loaded(tiny_llava_checkpoint):
    cache: dict[str, tuple] = {}

    def load(name: str, settings: dict):
        if name not in cache:
            # the LLM as wide as the tower, so every type builds (``identity`` passes features on unchanged)
            path = tiny_llava_checkpoint(name, extra_config=settings or None, hidden=TOWER_WIDTH)
            tokenizer, model, processor, _ = load_pretrained_model(str(path), None, get_model_name_from_path(str(path)), device="cpu")
            cache[name] = (path, model.eval())
        return cache[name]

    return load


def _encode(model, pixels: torch.Tensor):
    with torch.no_grad():
        out = model.encode_images(pixels)
    return list(out) if isinstance(out, (list, tuple)) else list(out.unbind(0))


@pytest.mark.parametrize("name, settings", registered_examples())
def test_round_trip_batch_independence_and_token_count(name, settings, loaded):
    path, model = loaded(name, settings)
    side = model.get_vision_tower().config.image_size
    torch.manual_seed(1)
    pixels = torch.randn(3, 3, side, side)

    together = _encode(model, pixels)
    alone = [_encode(model, pixels[i : i + 1])[0] for i in range(3)]
    assert len(together) == 3
    for one, other in zip(together, alone):
        assert one.shape == other.shape and one.shape[-1] == model.config.hidden_size
        torch.testing.assert_close(one, other, rtol=1e-5, atol=1e-5)  # no image's tokens depend on the batch

    # config.json alone rebuilds the same module: same keys, same shapes, and the builder writes back what it read
    stored = json.loads((path / "config.json").read_text())
    config = SimpleNamespace(**stored)
    rebuilt = build_vision_projector(config, vision_tower=model.get_vision_tower())
    projector = model.get_model().mm_projector
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {k: v.shape for k, v in projector.state_dict().items()}
    rebuilt.load_state_dict(projector.state_dict(), strict=True)
    assert {k: getattr(config, k) for k in stored} == stored
    assert projector_needs(rebuilt) == projector_needs(projector)
    assert isinstance(projector_needs(projector), ModelNeeds)

    # the plugin's cost model counts the tokens the module sends (adaptive types send a count of their own)
    tower = model.get_vision_tower()
    rows, cols = tower.grid_shape
    setting = CostSetting(mm_hidden=model.config.mm_hidden_size, lm=LMDims.from_config(model.config), grid=(rows, cols))
    plugin = plugin_for(name)
    assert plugin is not None and plugin.matches(name)
    try:
        cost = module_cost(name, setting, config)
    except ValueError as error:  # input-dependent token counts have no fixed cost
        assert "input-dependent" in str(error)
        return
    assert {one.shape[0] for one in together} == {cost.tokens}
