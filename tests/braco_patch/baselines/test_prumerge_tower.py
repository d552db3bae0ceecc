"""PruMerge on the model path of a tower with CLIP-L's depth and grid (24 layers, 24x24 patches, small width),
against an independent float64 computation written from the release's description:

- the score is the CLS row of ONE full-width product ``softmax(q_CLS · Kᵀ / √D)`` (``D`` = the whole width, not
  a head's), CLS column dropped;
- q and k come from ``encoder.layers[23]`` (the last layer, which reads ``mm_vision_select_layer -2``'s features),
  and the merge uses that layer's keys: ``y_i = x_i + Σ_{j ∈ 32-NN(i)} a_j x_j`` (key cosine), extra token
  ``Σ_{j pruned} a_j x_j``;
- adaptive mode keeps the scores above ``Q3 + 1.5 IQR`` (numpy's linear percentiles).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from llava.model.builder import load_pretrained_model


@pytest.fixture(scope="module")
def clip24(tmp_path_factory):
    """24 layers, 24x24 patches, width 16 in 4 heads; the last layer's q/k weights scaled by 4, so that its
    attention has a few clear IQR outliers (a random tower's attention is nearly uniform: none)."""
    from transformers import CLIPVisionModel

    from llava.testing.tiny import build_tiny_clip_tower

    path = build_tiny_clip_tower(tmp_path_factory.mktemp("clip24") / "clip", image_size=48, patch_size=2, hidden=16, heads=4, layers=24, seed=3)
    model = CLIPVisionModel.from_pretrained(str(path))
    attention = getattr(model, "vision_model", model).encoder.layers[23].self_attn
    with torch.no_grad():
        attention.q_proj.weight.mul_(4)
        attention.k_proj.weight.mul_(4)
    model.save_pretrained(str(path))
    return path


@pytest.fixture(scope="module")
def reference(clip24):
    """Pixels, select-layer features ``[576, D]`` and float64 ``(scores [576], keys [576, D])`` of layer 24."""
    from transformers import CLIPVisionModel

    pixels = torch.randn(1, 3, 48, 48, generator=torch.Generator().manual_seed(0))
    eager = CLIPVisionModel.from_pretrained(str(clip24), attn_implementation="eager").eval()
    with torch.no_grad():
        hidden = eager(pixels, output_hidden_states=True).hidden_states
        layer = getattr(eager, "vision_model", eager).encoder.layers[23]  # the 24th layer: its input is hidden_states[23] = select -2
        x = layer.layer_norm1(hidden[23]).double()[0]
        attn = layer.self_attn
        q = F.linear(x, attn.q_proj.weight.double(), attn.q_proj.bias.double())
        k = F.linear(x, attn.k_proj.weight.double(), attn.k_proj.bias.double())
    scores = torch.softmax(q[0] @ k.T / q.shape[-1] ** 0.5, dim=-1)[1:]
    return pixels, hidden[23][0, 1:].double(), scores.numpy(), k[1:]


def _expected_tokens(features, scores, keys, kept) -> torch.Tensor:
    """The release's merge, written as a loop in float64 (k = 32 neighbours, extra token last)."""
    a = torch.from_numpy(scores)
    unit = F.normalize(keys, dim=-1)
    rows = []
    for i in kept:
        sim = unit @ unit[i]
        sim[i] = -np.inf
        neighbours = sim.topk(32).indices
        rows.append(features[i] + (a[neighbours, None] * features[neighbours]).sum(0))
    pruned = sorted(set(range(576)) - set(kept))
    rows.append((a[pruned, None] * features[pruned]).sum(0))
    return torch.stack(rows)


def _model(tmp_path, clip24, tokenizer_dir, name):
    from llava.testing.tiny import build_tiny_llava_checkpoint

    checkpoint = build_tiny_llava_checkpoint(tmp_path / f"llava-{name}", clip24, tokenizer_dir, projector_type=name)
    _, model, _, _ = load_pretrained_model(str(checkpoint), None, checkpoint.name, device="cpu")
    return model.eval()


@pytest.mark.parametrize("name", ["prumerge_k16", "prumerge"])
def test_prumerge_scores_the_next_layer_with_one_full_width_product(name, tmp_path, clip24, tiny_tokenizer_dir, reference):
    pixels, features, scores, keys = reference
    model = _model(tmp_path, clip24, tiny_tokenizer_dir, name)
    projector = model.get_model().mm_projector
    seen = {}
    select = projector.compressor.select
    projector.compressor.select = lambda s: seen.setdefault("kept", select(s))
    with torch.no_grad():
        got = model.encode_images(pixels)[0]
    kept = [int(i) for i in seen["kept"][0]]
    if name == "prumerge_k16":
        count = 15
    else:
        q1, q3 = np.percentile(scores, [25, 75])
        threshold = q3 + 1.5 * (q3 - q1)
        count = int((scores > threshold).sum())
        assert count == 7 and np.abs(scores / threshold - 1).min() > 1e-3  # clear of the edge in float32
    expected_kept = np.argsort(-scores)[:count].tolist()
    assert kept == expected_kept  # same positions, same (descending-score) order
    expected = _expected_tokens(features, scores, keys, expected_kept)
    with torch.no_grad():
        expected = projector.project(expected.float())
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_prumerge_on_the_last_select_layer_is_one_sentence(tmp_path, clip24, tiny_tokenizer_dir):
    """There is no layer after the last one: loading such a config is refused before any weight is read."""
    import json

    from llava.testing.tiny import build_tiny_llava_checkpoint

    checkpoint = build_tiny_llava_checkpoint(tmp_path / "llava-prumerge_k16-last", clip24, tiny_tokenizer_dir, projector_type="prumerge_k16")
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "mm_vision_select_layer": -1}))
    with pytest.raises(ValueError, match=r"^mm_projector_type 'prumerge_k16' reads the attention of the encoder layer 1 after "
                                         r"mm_vision_select_layer -1, which the 24-layer vision tower does not have; select an "
                                         r"earlier layer \(at most 23 or -2\), e.g. LLaVA's -2$"):
        load_pretrained_model(str(checkpoint), None, checkpoint.name, device="cpu")
