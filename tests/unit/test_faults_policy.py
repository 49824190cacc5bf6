"""Policy as data: layers, the user-owned rule, configuration errors, the breaker arithmetic,
the Slurm reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sigwatch.config import ConfigProblemsError, load_config
from sigwatch.faults.policy import Policy, short_fix
from sigwatch.faults.settings import PolicySettings
from sigwatch.faults.slurm import (
    BreakerCounts,
    NodeState,
    breaker_verdict,
    fault_of_reason,
    make_reason,
)
from sigwatch.patterns.compiled import PatternSet
from sigwatch.patterns.loader import load_patterns

SIGNATURE = """
id = 'site_psu_fault'
title = 'Site PSU Fault'
severity = 'error'
owner = 'node'
[match]
regex = 'PSU FAULT'
[remediation]
summary = 'Swap the power supply. Then reboot.'
[policy]
action = 'drain'
count = 2
window_seconds = 3600
reason = 'swap the PSU'
[[examples]]
kind = 'match'
text = 'PSU FAULT'
"""


def _policy(**settings: Any) -> Policy:
    return Policy(PolicySettings.model_validate(settings))


class TestRules:
    def test_defaults_by_owner_and_severity(self, library: PatternSet) -> None:
        """Node-owned critical drains; node-owned error, fabric and unknown do not."""
        p = _policy()
        xid79 = library.get("nvidia_xid_79_fallen_off_bus")

        assert "drain" == p.rule(xid79.id, "node", "critical", xid79).action
        assert "none" == p.rule("x", "node", "error").action
        assert "none" == p.rule("x", "fabric", "critical").action
        assert "none" == p.rule("x", "unknown", "critical").action

    def test_the_config_defaults_change_an_owner_but_never_the_user(self) -> None:
        p = _policy(defaults={"fabric": {"critical": "drain"}})

        assert "drain" == p.rule("x", "fabric", "critical").action
        with pytest.raises(ValueError, match="never drains a node"):
            PolicySettings.model_validate({"defaults": {"user": {"critical": "drain"}}})

    def test_the_signature_file_overrides_the_defaults_and_the_config_overrides_the_file(
            self, write_pattern: Any) -> None:
        patterns, errors = load_patterns([write_pattern("site_psu_fault", SIGNATURE)])
        assert [] == errors
        sig = patterns.get("site_psu_fault")

        from_file = _policy().rule(sig.id, "node", "error", sig)
        from_config = _policy(signatures={"site_psu_fault": {"count": 5}}).rule(
            sig.id, "node", "error", sig)

        assert ("drain", 2, 3600.0, "swap the PSU", "signature file") == (
            from_file.action, from_file.count, from_file.window, from_file.reason,
            from_file.origin)
        assert (5, 3600.0, "signature file") == (from_config.count, from_config.window,
                                                 from_config.origin)
        assert "drain after 5 within 1h (signature file)" == from_config.describe()

    def test_a_user_owned_signature_never_drains_whatever_the_layers_say(
            self, library: PatternSet) -> None:
        oom = library.get("cuda_out_of_memory")
        p = _policy(signatures={"cuda_out_of_memory": {"action": "drain"}})

        rule = p.rule(oom.id, oom.owner, oom.severity.label, oom)

        assert "none" == rule.action
        assert [("policy.signatures.cuda_out_of_memory.action",
                 "a user-owned signature never drains a node")] == p.check(library.signatures)

    def test_check_names_unknown_signatures_and_recovery_lines(self, library: PatternSet) -> None:
        p = _policy(signatures={"no_such_sig": {"action": "drain"},
                                "nvidia_xid_79_fallen_off_bus": {"recovered_by": ["nope_x"]},
                                "training_stalled": {"action": "none"}})

        assert [("policy.signatures.no_such_sig", "no signature has this id"),
                ("policy.signatures.nvidia_xid_79_fallen_off_bus.recovered_by",
                 "no signature has the id 'nope_x'")] == p.check(library.signatures)

    def test_the_short_fix_is_the_first_sentence_in_plain_ascii(self) -> None:
        assert "Xid 79: the GPU fell off the bus" == short_fix(
            "Xid 79: the GPU fell off the bus; it is unusable until rebooted.")
        assert "Swap the (left) PSU" == short_fix("Swap the [left] PSU. Then reboot.")
        long = short_fix("word " * 60)
        assert len(long) <= 96 and long.endswith("...")


class TestConfig:
    def test_errors_name_the_field(self, tmp_path: Path) -> None:
        config = tmp_path / "c.toml"
        config.write_text('[policy]\nmode = "enforce"\n[slurm]\nmax_share = 0\n')

        with pytest.raises(ConfigProblemsError) as caught:
            load_config(config)

        fields = sorted(e.field for e in caught.value.errors)
        assert ["policy.mode", "slurm.max_share"] == fields

    def test_a_count_without_a_window_anywhere_is_refused(self, library: PatternSet) -> None:
        p = _policy(signatures={"nvidia_xid_48_double_bit_ecc": {"count": 3}})

        assert [("policy.signatures.nvidia_xid_48_double_bit_ecc.count",
                 "a count above 1 needs window_seconds (here or in the signature file): the "
                 "count is within it")] == p.check(library.signatures)

    def test_check_config_refuses_a_drain_for_a_user_owned_signature(
            self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        from sigwatch.cli import main

        config = tmp_path / "c.toml"
        config.write_text(f'state_dir = "{tmp_path}/state"\nlisten = "127.0.0.1:0"\n'
                          "[policy.signatures.cuda_out_of_memory]\naction = \"drain\"\n")

        assert 2 == main(["check-config", str(config)])
        err = capsys.readouterr().err
        assert (f"{config}: policy.signatures.cuda_out_of_memory.action: a user-owned "
                "signature never drains a node") in err


class TestBreaker:
    @pytest.mark.parametrize(("total", "drained", "share", "allowed"), [
        (4, 1, 0.5, True), (4, 2, 0.5, False), (4, 0, 0.10, True), (4, 1, 0.10, False),
        (100, 9, 0.10, True), (100, 10, 0.10, False)],
        ids=["half-of-4-one-drained", "half-of-4-two-drained", "tiny-partition-first",
             "tiny-partition-second", "100-nodes-9", "100-nodes-10"])
    def test_the_share_allows_at_least_one_node(self, total: int, drained: int, share: float,
                                                allowed: bool) -> None:
        verdict = breaker_verdict(BreakerCounts(total, drained, 0, ("gpu",)), local_recent=0,
                                  max_share=share, max_per_hour=100)

        assert allowed == verdict.allowed
        assert ("" if allowed else "refused_share") == verdict.outcome

    def test_the_rate_counts_the_controllers_and_this_nodes_recent_drains(self) -> None:
        counts = BreakerCounts(100, 1, 1, ("gpu",))

        assert breaker_verdict(counts, local_recent=2, max_share=1, max_per_hour=3).allowed
        refused = breaker_verdict(counts, local_recent=3, max_share=1, max_per_hour=3)
        assert ("refused_rate", False) == (refused.outcome, refused.allowed)


class TestReason:
    def test_sigwatch_finds_its_fault_id_back_and_nobody_elses(self) -> None:
        reason = make_reason("nvidia_xid_79_fallen_off_bus", "reboot [then] check", "f1234abc")

        assert "f1234abc" == fault_of_reason(reason)
        assert fault_of_reason("maintenance [f1234abc]") is None
        assert fault_of_reason("sigwatch: x: no id") is None
        assert fault_of_reason("NHC: check_gpu: Xid 79 [f1234abc]") is None

    @pytest.mark.parametrize(("state", "drained"), [
        ("idle", False), ("drained", True), ("draining", True), ("drained*", True),
        ("idle*", False), ("mixed", False), ("down*", False)])
    def test_the_drain_flag_is_read_from_the_state(self, state: str, drained: bool) -> None:
        assert drained == NodeState("n1", state, "", None).drained
