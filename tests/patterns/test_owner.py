"""Every detection says whose fault it is: the user's job, this node, the fabric, or unknown.

The owner decides who is blamed: a node-owned fault may drain the node and names it as the
culprit of a job's failure; a user-owned one never blames a node.
"""

from __future__ import annotations

import pytest

from sigwatch.checks.selftest import detect_text
from sigwatch.patterns.compiled import PatternSet
from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns
from sigwatch.patterns.schema import OWNERS
from sigwatch.pipeline import Engine


@pytest.fixture(name="library", scope="module")
def _library() -> PatternSet:
    patterns, errors = load_patterns([builtin_pattern_dir()])
    assert [] == errors
    return patterns


class TestLibraryOwners:
    def test_every_error_and_critical_signature_names_an_owner(self, library) -> None:
        missing = [s.id for s in library.signatures
                   if s.severity.label in ("error", "critical") and s.raw.owner is None]

        assert [] == missing

    def test_owners_come_from_the_closed_set(self, library) -> None:
        assert {s.owner for s in library.signatures} <= set(OWNERS)

    def test_a_drain_action_is_never_user_owned(self, library) -> None:
        """A fix that drains the node cannot belong to a fault of the user's job."""
        wrong = [s.id for s in library.signatures
                 if s.remediation.action == "drain_node" and s.owner == "user"]

        assert [] == wrong


@pytest.mark.parametrize(("text", "signature", "owner"), [
    ("[Mon Nov 24 03:12:09 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, "
     "GPU has fallen off the bus.", "nvidia_xid_79_fallen_off_bus", "node"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
     "cuda_out_of_memory", "user"),
    ("NCCL WARN NET/IB : Got completion from peer 10.0.0.2<50432> with status=12 "
     "opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.1 remoteGids",
     "nccl_ib_completion_error", "fabric"),
])
def test_detections_carry_the_owner_of_their_signature(
        library: PatternSet, text: str, signature: str, owner: str) -> None:
    found = {d.signature: d for d in detect_text(Engine(library), text)}

    assert signature in found
    assert owner == found[signature].owner
    assert owner == found[signature].to_json()["owner"]
