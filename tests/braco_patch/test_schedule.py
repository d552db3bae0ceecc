"""Temperature schedules (official set_step semantics) and the trainer callback."""

import math
from types import SimpleNamespace

import pytest
import torch.nn as nn

from braco_patch import BracoAnnealCallback, BracoCoder, scheduled_temperature


@pytest.mark.parametrize(
    "schedule, expected",
    [("cosine", (2.0, 1.6, 1.2)), ("linear", (2.0, 1.6, 1.2)), ("exp", (2.0, 1.28, 1.208))],
)
def test_official_values(schedule, expected):
    got = [scheduled_temperature(s, temperature=0.8, start=2.0, end=1.2, steps=100, schedule=schedule) for s in (0, 50, 100)]
    assert got == pytest.approx(expected, abs=1e-12)


def test_cosine_quarter_point_and_clamping():
    tau = scheduled_temperature(25, temperature=0.8, start=2.0, end=1.2, steps=100)
    assert tau == pytest.approx(1.2 + 0.4 * (1 + math.cos(math.pi / 4)))
    assert scheduled_temperature(-5, temperature=0.8, start=2.0, end=1.2, steps=100) == 2.0
    assert scheduled_temperature(10_000, temperature=0.8, start=2.0, end=1.2, steps=100) == pytest.approx(1.2)


@pytest.mark.parametrize("steps", [0, -1])
def test_no_steps_keeps_constant_temperature(steps):
    assert scheduled_temperature(50, temperature=0.8, start=2.0, end=1.2, steps=steps) == 0.8


def test_unset_start_or_end_is_constant_and_floor():
    assert scheduled_temperature(3, temperature=0.8, start=None, end=1.2, steps=10) == 0.8
    assert scheduled_temperature(10, temperature=0.8, start=1.0, end=0.0, steps=10, schedule="linear") == 1e-6


def test_callback_drives_every_annealed_coder():
    coders = [BracoCoder(8, 1, 2, temp_start=2.0, temp_end=1.2, temp_steps=100) for _ in range(2)]
    plain = BracoCoder(8, 1, 2)
    model = nn.ModuleList([nn.Sequential(coders[0], nn.Linear(8, 8)), coders[1], plain])
    cb = BracoAnnealCallback()
    state = SimpleNamespace(global_step=0, max_steps=200)
    cb.on_train_begin(None, state, None, model=model)
    assert [float(c.temperature_cur) for c in coders] == pytest.approx([2.0, 2.0])
    state.global_step = 50
    cb.on_step_end(None, state, None, model=model)
    assert [float(c.temperature_cur) for c in coders] == pytest.approx([1.6, 1.6])
    assert float(plain.temperature_cur) == pytest.approx(0.8)  # not annealed: inference temperature
