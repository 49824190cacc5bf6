"""A failure of the user's job drains nothing, even at critical severity."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from support.daemon import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SITE_SIGNATURE = """\
id = 'site_job_fatal_test'
title = 'Site Job Fatal Test Line'
severity = 'critical'
owner = 'user'
description = 'Detects the fatal line of the site test job.'

[match]
regex = 'SITEJOB FATAL: (?P<what>.+)'
keywords = ['SITEJOB FATAL']

[remediation]
summary = 'Fix the job.'
action = 'fix_job_code'

[[examples]]
kind = 'match'
text = 'SITEJOB FATAL: boom'

[[examples]]
kind = 'no_match'
text = 'SITEJOB ok'
"""
OOM = ("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 "
       "has a total capacity of 31.47 GiB of which 12.73 GiB is free.")


def test_user_owned_failures_open_no_fault_and_drain_nothing(
        tmp_path: Path, cluster: Any, sigwatch_node: Any) -> None:
    """CUDA out of memory (user, error) and a site signature (user, critical): the policy says
    none for both; the node stays idle, no fault opens, health is 0."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "site_job_fatal_test.toml").write_text(textwrap.dedent(SITE_SIGNATURE))
    node = sigwatch_node("n2", top=f'add_patterns = ["{site}"]').start()

    node.train_line(OOM)
    node.train_line("SITEJOB FATAL: rank 0 raised")

    wait_for(lambda: node.decisions("none") >= 2, 60, "both detections decided")
    assert 1.0 == node.detections("cuda_out_of_memory", "training", "error")
    assert 1.0 == node.detections("site_job_fatal_test", "training", "critical")
    assert not cluster.node("n2").drained
    assert "" == cluster.node("n2").reason
    assert [] == node.faults()
    assert 0.0 == node.actions("drain", "drained")
    assert 0.0 == node.metric('sigwatch_faults_opened_total{owner="node"}')
    code, line = node.health()
    assert 0 == code, line
    assert line.startswith("ok: no open fault")
