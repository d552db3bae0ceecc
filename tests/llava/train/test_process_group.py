"""A training stage closes the process group its launcher started, whether it succeeds or stops on an error.

Left open until interpreter exit, the group's communication threads can abort a finished run (a DeepSpeed stage-1
run on CPU saved everything, then ended with "terminate called without an active exception", exit 250).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch.distributed as dist

from llava.train.train import train


@pytest.fixture
def process_group(tmp_path: Path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_a_stage_that_stops_on_an_error_closes_the_process_group(process_group, tmp_path: Path) -> None:
    assert dist.is_initialized()
    with pytest.raises(ValueError, match="missing.json' does not exist"):  # refused before any model loads
        train(argv=["--model_name_or_path", str(tmp_path / "llm"), "--data_path", str(tmp_path / "missing.json"),
                    "--output_dir", str(tmp_path / "out"), "--report_to", "none", "--use_cpu", "True"])
    assert not dist.is_initialized()
