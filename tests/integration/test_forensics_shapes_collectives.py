"""Issue 30's job shapes, MoE all_to_all_single (odd splits, a hang) and FSDP-like all_gather/reduce_scatter (one all_gather skipped): named right by run-trainer and by postmortem of a plain torchrun log dir. The
checks and what they assert: test_forensics_shapes.py (a file per family, so CI's --dist loadfile spreads them)."""
from __future__ import annotations

import pytest

from tests.integration.shape_jobs import SHAPES
from tests.integration.test_forensics_shapes import check_postmortem, check_run_trainer

pytestmark = pytest.mark.slow
NAMES = ["moe-splits", "moe-hang", "moe-healthy", "fsdp-skip", "fsdp-healthy"]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", NAMES)
def test_run_trainer_names_the_culprit(name, tmp_path):
    check_run_trainer(SHAPES[name], tmp_path)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", NAMES)
def test_postmortem_of_plain_torchrun_names_the_culprit(name, tmp_path):
    check_postmortem(SHAPES[name], tmp_path)
