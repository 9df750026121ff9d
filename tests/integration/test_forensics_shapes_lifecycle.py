"""Issue 30's job shapes, ranks that never reach init_process_group, are SIGKILLed from outside, or leave early (exit 0): named right by run-trainer and by postmortem of a plain torchrun log dir. The
checks and what they assert: test_forensics_shapes.py (a file per family, so CI's --dist loadfile spreads them)."""
from __future__ import annotations

import pytest

from tests.integration.shape_jobs import SHAPES
from tests.integration.test_forensics_shapes import check_postmortem, check_run_trainer

pytestmark = pytest.mark.slow
NAMES = ["lifecycle-noinit", "lifecycle-kill", "lifecycle-early", "lifecycle-healthy"]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", NAMES)
def test_run_trainer_names_the_culprit(name, tmp_path):
    check_run_trainer(SHAPES[name], tmp_path)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", NAMES)
def test_postmortem_of_plain_torchrun_names_the_culprit(name, tmp_path):
    check_postmortem(SHAPES[name], tmp_path)
