"""Which signatures apply to which streams: kernel messages, job output, or any.

An NVIDIA Xid, an amdgpu page fault or an EDAC error is only news when the *kernel* says it;
the same words in a job's log are a quote (a test printing an example, a wrapper dumping
``dmesg`` into its output, an error message that repeats the kernel's). A signature says what
it applies to with ``sources = ["kernel"]``, ``["job"]`` or ``["any"]`` (the default); each
stream has one content kind, derived from how it is read (``StreamOpened.kind``) unless its
configuration says otherwise (a file that is ``/var/log/kern.log`` is kernel content, an
unfiltered journal is mixed).

The runtime calls ``applies`` (or, once per stream, ``allowed_signatures``) and drops matches
of signatures that do not apply: that costs nothing on lines that match nothing.
"""

from __future__ import annotations

from collections.abc import Collection

from sigwatch.patterns.compiled import PatternSet

__all__ = [
    "CONTENT_KINDS",
    "SIGNATURE_KINDS",
    "allowed_signatures",
    "applies",
    "content_of",
]

SIGNATURE_KINDS = ("kernel", "job", "any")
CONTENT_KINDS = ("kernel", "job", "mixed")
# How a stream is read -> what it holds, when the configuration does not say.
_DEFAULT_CONTENT = {
    "kmsg": "kernel",
    "journal-kernel": "kernel",
    "file": "job",
    "pipe": "job",
    "exec": "job",
    "container": "job",
    "journal": "mixed",
    "test": "mixed",
    "scan": "mixed",
}


def content_of(stream_kind: str, override: str | None = None) -> str:
    """The content kind of a stream: ``override`` when given, else the reader's default.

    ``stream_kind`` may already be a content kind. Unknown kinds are ``mixed`` (everything
    applies), so a new reader can never silence a signature by accident.
    """
    if override is not None:
        if override not in CONTENT_KINDS:
            msg = f"unknown content kind {override!r} (one of {', '.join(CONTENT_KINDS)})"
            raise ValueError(msg)
        return override
    if stream_kind in CONTENT_KINDS:
        return stream_kind
    return _DEFAULT_CONTENT.get(stream_kind, "mixed")


def applies(signature_kinds: Collection[str], stream_kind: str) -> bool:
    """True when a signature with ``sources = signature_kinds`` may fire on such a stream."""
    if not signature_kinds or "any" in signature_kinds:
        return True
    content = content_of(stream_kind)
    return content == "mixed" or content in signature_kinds


def allowed_signatures(patterns: PatternSet, stream_kind: str) -> frozenset[str]:
    """Ids of the signatures that apply to a stream of this kind (compute once per stream)."""
    return frozenset(s.id for s in patterns.signatures if applies(s.sources, stream_kind))
