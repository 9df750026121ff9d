"""Issue 30's job shapes, MoE all_to_all_single (odd splits, a hang) and FSDP-like all_gather/reduce_scatter (one all_gather skipped): named right by run-trainer and by postmortem of a plain torchrun log dir. The
checks and what they assert: test_forensics_shapes.py (a file per family; each shape's two tests share its runs: by_shape)."""
from __future__ import annotations

import pytest

from tests.integration.shape_jobs import SHAPES
from tests.integration.test_forensics_shapes import by_shape, check_postmortem, check_run_trainer

pytestmark = pytest.mark.slow
NAMES = ["moe-splits", "moe-hang", "moe-healthy", "fsdp-skip", "fsdp-healthy"]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", by_shape(NAMES))
def test_run_trainer_names_the_culprit(name, tmp_path_factory):
    check_run_trainer(SHAPES[name], tmp_path_factory)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", by_shape(NAMES))
def test_postmortem_of_plain_torchrun_names_the_culprit(name, tmp_path_factory):
    check_postmortem(SHAPES[name], tmp_path_factory)
