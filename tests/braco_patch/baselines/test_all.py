"""Properties every baseline shares: output shapes per budget, batch = stacked batch-1 runs, gradients, dtypes."""

import copy
from collections.abc import Callable

import pytest
import torch

from braco_patch.baselines import CDPruner, DivPrune, FourierVLM, MQTAbstractor, PruMerge, QueCC, TokenPacker, VisionZip, VisPruner
from braco_patch.baselines.llava_plugin import PLUGINS

D, LLM, TEXT, SIDE = 16, 24, 20, 12  # 12 x 12 grid: s = 6/4/3 give K = 4/9/16


def _inputs(name: str, batch: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    n = SIDE * SIDE
    x = torch.randn(batch, n, D, generator=g)
    if name in ("prumerge", "prumerge_plus"):
        attention = torch.randn(batch, 2, n + 1, n + 1, generator=g).softmax(-1)
        return {"features": x, "attention": attention, "keys": torch.randn(batch, n + 1, 8, generator=g)}
    if name == "divprune":
        return {"tokens": torch.randn(batch, n, LLM, generator=g)}
    if name == "quecc":
        return {"features": x, "levels": torch.randn(batch, n, 4 * D, generator=g), "text_states": torch.randn(batch, 3, TEXT, generator=g),
                "text_mask": torch.ones(batch, 3)}
    if name == "tokenpacker":
        return {"features": x, "levels": torch.randn(batch, n, 4 * D, generator=g)}
    if name in ("visionzip", "vispruner"):
        attention = (3 * torch.randn(batch, 2, n + 1, n + 1, generator=g)).softmax(-1)
        extra = {"keys": torch.randn(batch, n + 1, D, generator=g), "cls_token": torch.randn(batch, D, generator=g)} if name == "visionzip" else {}
        return {"features": x, "attention": attention, **extra}
    if name == "cdpruner":
        return {"tokens": torch.randn(batch, n, LLM, generator=g), "image_embeds": torch.randn(batch, n, TEXT, generator=g),
                "text_embeds": torch.randn(batch, 2, TEXT, generator=g)}
    return {"features": x}


BUILD: dict[str, Callable[[int], torch.nn.Module]] = {
    "prumerge": lambda k: PruMerge(D, k, neighbours=8),
    "prumerge_plus": lambda k: PruMerge(D, k, plus=True, neighbours=8),
    "divprune": lambda k: DivPrune(k),
    "mqt": lambda k: MQTAbstractor(D, LLM, 36, num_tokens=k, heads=2),
    "quecc": lambda k: QueCC(D, k, SIDE, TEXT, heads=2),
    "tokenpacker": lambda k: TokenPacker(D, LLM, k, SIDE, heads=2),
    "fouriervlm": lambda k: FourierVLM(D, k),
    "visionzip": lambda k: VisionZip(D, k),
    "vispruner": lambda k: VisPruner(D, k),
    "cdpruner": lambda k: CDPruner(k),
}
WIDTH = {"divprune": LLM, "mqt": LLM, "tokenpacker": LLM, "cdpruner": LLM}


def test_every_registered_baseline_is_covered():
    # every method file of the package (its plugin, found by discovery) has a module built here
    assert {plugin.name for plugin in PLUGINS} <= set(BUILD)


@pytest.mark.parametrize("name", sorted(BUILD))
@pytest.mark.parametrize("budget", [4, 9, 16])
def test_output_shape_per_budget(name, budget):
    torch.manual_seed(0)
    module = BUILD[name](budget).eval()
    out = module(**_inputs(name, 2))
    assert out.shape == (2, budget, WIDTH.get(name, D)) and module.output_tokens == budget
    assert torch.isfinite(out).all()
    assert module.boundary in ("pre", "post")


@pytest.mark.parametrize("name", sorted(BUILD))
def test_batch_of_three_equals_three_single_runs(name):
    torch.manual_seed(0)
    module = BUILD[name](9).eval()
    inputs = _inputs(name, 3, seed=1)
    batched = module(**inputs)
    for i in range(3):
        single = module(**{k: v[i : i + 1] for k, v in inputs.items()})
        torch.testing.assert_close(batched[i : i + 1], single, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(BUILD))
def test_gradients_reach_parameters_or_inputs(name):
    torch.manual_seed(0)
    module = BUILD[name](9).train()
    inputs = _inputs(name, 2)
    first = next(iter(inputs))
    inputs[first].requires_grad_(True)
    module(**inputs).square().sum().backward()
    params = list(module.parameters())
    if name in ("prumerge", "prumerge_plus", "divprune", "fouriervlm", "visionzip", "vispruner", "cdpruner"):
        assert params == []  # training-free: only the inputs carry gradient
    for p in params:
        assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient for a parameter of shape {tuple(p.shape)}"
    assert inputs[first].grad.abs().sum() > 0


@pytest.mark.parametrize("name", sorted(BUILD))
def test_bfloat16_matches_float32_on_the_same_values(name):
    torch.manual_seed(0)
    module = BUILD[name](9).eval().to(torch.bfloat16)
    reference = copy.deepcopy(module).float()
    inputs = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in _inputs(name, 2).items()}
    out = module(**inputs)
    expected = reference(**{k: v.float() if v.is_floating_point() else v for k, v in inputs.items()})
    assert out.dtype == torch.bfloat16
    err = (out.float() - expected).abs().amax() / expected.abs().amax()
    assert err < 3e-2, f"relative error {float(err):.3g}"


@pytest.mark.parametrize("name", ["quecc", "tokenpacker"])
def test_region_methods_refuse_25_on_a_24_grid(name):
    build = {"quecc": lambda: QueCC(1024, 25, 24, 4096), "tokenpacker": lambda: TokenPacker(1024, 4096, 25, 24)}[name]
    with pytest.raises(ValueError) as err:
        build()
    message = str(err.value)
    assert "25" in message and "accepted budgets" in message and "\n" not in message and message.count(". ") == 0


@pytest.mark.parametrize("name", ["prumerge", "divprune", "mqt", "fouriervlm", "visionzip", "vispruner", "cdpruner"])
def test_25_tokens_where_the_method_allows_it(name):
    module = BUILD[name](25).eval()
    assert module(**_inputs(name, 1)).shape[1] == 25


def test_parameter_counts_of_the_released_sizes():
    # Facts from the releases: MQT-LLaVA's abstractor ~8.7 M parameters, TokenPacker ~37 M (CLIP-L, Vicuna-7B).
    with torch.device("meta"):
        mqt = MQTAbstractor(1024, 4096, 256)
        packer = TokenPacker(1024, 4096, 16, 24)
    assert sum(p.numel() for p in mqt.parameters()) / 1e6 == pytest.approx(8.7, rel=1e-2)
    assert sum(p.numel() for p in packer.parameters()) / 1e6 == pytest.approx(37, rel=1.5e-2)
