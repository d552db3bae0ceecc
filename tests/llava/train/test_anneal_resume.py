"""Temperature annealing during training, and a killed run resumed from its checkpoint."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from llava.train.train import train

from .conftest import Run, SimulatedKill, recording, stage1_flags


def cosine(step: int, start: float, end: float, steps: int) -> float:
    """The paper's cosine schedule, written out independently of braco_patch.schedule."""
    progress = min(max(step, 0), steps) / steps
    return end + 0.5 * (start - end) * (1.0 + math.cos(math.pi * progress))


def _seen(temperatures: list[tuple[int, float]]) -> dict[int, set[float]]:
    by_step: dict[int, set[float]] = defaultdict(set)
    for step, value in temperatures:
        by_step[step].add(value)
    return by_step


def _coder(run_model) -> torch.nn.Module:
    return run_model.get_model().mm_projector[0]


@pytest.mark.parametrize("stage, start, end", [("stage1_braco", 2.0, 1.2), ("stage2_braco", 1.2, 0.8)])
def test_coder_sees_the_scheduled_temperature(request, stage: str, start: float, end: float):
    run: Run = request.getfixturevalue(stage)
    steps = run.observation.max_steps
    seen = _seen(run.observation.temperatures)
    assert sorted(seen) == list(range(steps))  # every optimizer step ran the coder, from step 0
    for step in (0, steps // 2, steps - 1):
        assert len(seen[step]) == 1, step
        assert seen[step].pop() == pytest.approx(cosine(step, start, end, steps), abs=1e-6), step
    assert float(_coder(run.trainer.model).temperature_cur) == pytest.approx(end, abs=1e-6)


def test_killed_run_resumes_the_schedule_and_loses_no_step(tmp_path: Path, tiny_base_llm, tiny_tower_dir, train_data, stage1_braco: Run):
    output = tmp_path / "llava-tiny-braco-pretrain"
    argv = stage1_flags(tiny_base_llm, tiny_tower_dir, train_data, "braco_c2s5", output)
    argv[argv.index("--save_steps") + 1] = "2"
    with recording(kill_at_step=3) as first, pytest.raises(SimulatedKill):
        train(argv=argv)
    assert [p.name for p in output.glob("checkpoint-*")] == ["checkpoint-2"]
    assert not (output / "mm_projector.bin").exists()
    assert sorted(_seen(first.temperatures)) == [0, 1, 2]
    checkpoint = torch.load(output / "checkpoint-2" / "mm_projector.bin", weights_only=True)

    with recording() as second:
        trainer = train(argv=argv)
    steps = second.max_steps
    assert second.first_step == 2 and steps == stage1_braco.observation.max_steps == 6
    seen = _seen(second.temperatures)
    assert sorted(seen) == list(range(2, steps))  # resumes at the checkpoint's step, runs exactly the rest
    for step in range(2, steps):
        assert len(seen[step]) == 1 and seen[step].pop() == pytest.approx(cosine(step, 2.0, 1.2, steps), abs=1e-6), step
    assert trainer.state.global_step == steps
    assert json.loads((output / "trainer_state.json").read_text())["global_step"] == steps

    for key, value in second.projector_at_start.items():
        assert torch.equal(value, checkpoint["model.mm_projector." + key]), key
    # Same data order, optimizer state and RNG as the uninterrupted run: the same projector at the end.
    resumed = torch.load(output / "mm_projector.bin", weights_only=True)
    uninterrupted = torch.load(stage1_braco.output / "mm_projector.bin", weights_only=True)
    for key, value in uninterrupted.items():
        torch.testing.assert_close(resumed[key], value, rtol=1e-5, atol=1e-6, msg=lambda text, key=key: f"{key}: {text}")
