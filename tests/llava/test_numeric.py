"""The one rule for numbers users give (issue 31, fault group 6): finite and within range, for every command and
server. ``> 0`` alone lets ``inf``, ``nan`` and ``1e-320`` through, which then overflow where they are used."""

from __future__ import annotations

import argparse
import math

import pytest

from llava.numeric import MAX_SECONDS, check_number, check_seconds, number_type, seconds_type
from llava.utils import UserError


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), 0.0, -1.0, MAX_SECONDS * 2, True, "5", None])
def test_a_timeout_must_be_finite_positive_and_at_most_a_week(value) -> None:
    with pytest.raises(UserError, match=r"^--stream-timeout must be a finite number above 0 and at most 604800 \(seconds\), got "):
        check_seconds(value, "--stream-timeout")


@pytest.mark.parametrize("value", [1e-320, 5e-324, 1.0, 600, MAX_SECONDS])
def test_every_finite_timeout_in_range_passes(value) -> None:
    assert check_seconds(value, "--stream-timeout") == float(value) and math.isfinite(check_seconds(value, "--x"))


def test_a_tiny_rate_is_refused_by_its_range_not_only_its_sign() -> None:
    # 30 fps / 1e-320 is inf: the range's lower bound, not "> 0", is what keeps the step finite (V04)
    with pytest.raises(UserError, match=r"^--video-fps must be a finite number from 0.001 to 1000, got 1e-320$"):
        check_number(1e-320, "--video-fps", 0.001, 1000)
    assert check_number(0.5, "--video-fps", 0.001, 1000) == 0.5


def test_integers_are_whole_and_bounded() -> None:
    assert check_number(4.0, "--frames", 0, 10, integer=True) == 4 and isinstance(check_number(4.0, "--f", 0, 10, integer=True), int)
    for bad in (4.5, 11, -1, float("inf"), False):
        with pytest.raises(UserError, match=r"^--frames must be an integer from 0 to 10, got "):
            check_number(bad, "--frames", 0, 10, integer=True)


@pytest.mark.parametrize("text", ["inf", "nan", "-inf", "0", "-1", "1e9", "abc", ""])
def test_the_argparse_type_refuses_before_anything_runs(text) -> None:
    parser = argparse.ArgumentParser(prog="cmd")
    parser.add_argument("--stream-timeout", type=seconds_type())
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--stream-timeout", text])
    assert exit_info.value.code == 2


def test_the_argparse_type_names_what_it_accepts(capsys) -> None:
    parser = argparse.ArgumentParser(prog="cmd")
    parser.add_argument("--count", type=number_type(1, integer=True))
    parser.add_argument("--share", type=number_type(0, 1))
    assert parser.parse_args(["--count", "3", "--share", "0.25"]) == argparse.Namespace(count=3, share=0.25)
    with pytest.raises(SystemExit):
        parser.parse_args(["--count", "0"])
    assert "argument --count: expected a positive integer, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["--share", "nan"])
    assert "argument --share: expected a finite number from 0 to 1, got 'nan'" in capsys.readouterr().err
