"""The one catalogue of metric names.

Every metric sigwatch exports is created here, with its help text and label names. Labels come
from closed sets only: signature ids, severities, configured source names and small enums of
reasons. Never a path, a PID or log text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Info
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from sigwatch.model import CUT_FIELDS

__all__ = ["DATA_LOSS_REASONS", "EVENTLOG_REOPEN_REASONS", "FILE_ERROR_REASONS",
           "FILE_REFUSAL_REASONS", "JOB_GAUGES", "JOB_REFUSALS", "JobCollector", "SelfMetrics"]

DATA_LOSS_REASONS = ("truncated", "rotated_away", "changed_while_down", "kmsg_overrun")
"""Every ``reason`` of ``sigwatch_data_loss_events_total``: all exist at zero from start-up."""
FILE_ERROR_REASONS = ("permission", "fd_limit", "not_regular", "io")

EVENTLOG_REOPEN_REASONS = ("sighup", "deleted", "replaced", "truncated")
FILE_REFUSAL_REASONS = ("not_regular", "outside_tree")


class SelfMetrics:
    """All of sigwatch's metrics, registered on an injected registry."""

    def __init__(self, registry: CollectorRegistry, version: str, *,
                 revision: str = "unknown", prefilter: str = "unknown") -> None:
        r = registry
        # Output.
        self.detections = Counter(
            "sigwatch_detections", "Detections of known failure signatures.",
            ["signature", "severity", "source"], registry=r)
        self.last_detection = Gauge(
            "sigwatch_last_detection_timestamp_seconds",
            "Unix time of the latest detection of a signature (0 = never).",
            ["signature", "source"], registry=r)
        # Input.
        self.lines = Counter(
            "sigwatch_lines", "Complete lines read.", ["source"], registry=r)
        self.bytes_read = Counter(
            "sigwatch_bytes_read", "Bytes read from sources.", ["source"], registry=r)
        self.lines_truncated = Counter(
            "sigwatch_lines_truncated",
            "Lines longer than max_line_bytes, cut to the limit (the rest is not matched).",
            ["source"], registry=r)
        self.invalid_utf8 = Counter(
            "sigwatch_invalid_utf8_lines",
            "Lines holding invalid UTF-8, decoded with replacement characters.",
            ["source"], registry=r)
        self.files_watched = Gauge(
            "sigwatch_files_watched", "Files currently tailed.", ["source"], registry=r)
        self.rotations = Counter(
            "sigwatch_file_rotations",
            "Files replaced under their path (rename, delete-and-recreate, atomic replace).",
            ["source"], registry=r)
        self.truncations = Counter(
            "sigwatch_file_truncations",
            "Files truncated or rewritten in place; reading restarted at byte 0.",
            ["source"], registry=r)
        self.data_loss = Counter(
            "sigwatch_data_loss_events",
            "Places where data could not be read (copytruncate gap, file rotated away while "
            "the daemon was down, unreadable file).",
            ["source", "reason"], registry=r)
        self.nul_bytes_skipped = Counter(
            "sigwatch_nul_bytes_skipped",
            "NUL bytes skipped (holes left by a non-O_APPEND writer after truncation).",
            ["source"], registry=r)
        self.file_errors = Counter(
            "sigwatch_file_errors", "Errors opening, reading or statting watched files.",
            ["source", "reason"], registry=r)
        self.watch_mode = Gauge(
            "sigwatch_watch_mode",
            "1 for the file-change notification mode in use (inotify or polling only).",
            ["mode"], registry=r)
        # Matching.
        self.regex_timeouts = Counter(
            "sigwatch_regex_timeouts",
            "Regex calls stopped by the per-call timeout (the line is treated as no match).",
            ["signature"], registry=r)
        # Patterns.
        self.patterns_loaded = Gauge(
            "sigwatch_patterns_loaded", "Signatures in the active pattern set.", registry=r)
        self.reload_success = Gauge(
            "sigwatch_patterns_last_reload_successful",
            "1 if the last pattern (re)load succeeded, 0 if it failed and the old set is kept.",
            registry=r)
        self.reload_failures = Counter(
            "sigwatch_pattern_reload_failures",
            "Pattern reloads that failed; the previous set stayed active.", registry=r)
        self.reload_timestamp = Gauge(
            "sigwatch_patterns_last_reload_timestamp_seconds",
            "Unix time of the last pattern reload attempt.", registry=r)
        # State.
        self.checkpoint_writes = Counter(
            "sigwatch_checkpoint_writes", "Checkpoints committed.", registry=r)
        self.checkpoint_errors = Counter(
            "sigwatch_checkpoint_errors",
            "Checkpoint writes that failed (full or read-only state dir); tailing goes on.",
            registry=r)
        self.checkpoint_recoveries = Counter(
            "sigwatch_checkpoint_recoveries",
            "Start-ups that could not use the newest checkpoint, by what was used instead.",
            ["mode"], registry=r)
        self.events_rolled_back = Counter(
            "sigwatch_events_rolled_back",
            "Uncommitted event-log records removed at start-up (they are re-emitted on replay).",
            registry=r)
        self.sink_errors = Counter(
            "sigwatch_sink_errors", "Errors writing detections to a sink.", ["sink"],
            registry=r)
        self.sink_dropped = Counter(
            "sigwatch_sink_dropped",
            "Detections a sink had to drop (its queue was full, or it could not be closed in "
            "time).", ["sink"], registry=r)
        self.sink_queue_depth = Gauge(
            "sigwatch_sink_queue_depth", "Detections waiting in a sink's queue.", ["sink"],
            registry=r)
        self.source_lag = Gauge(
            "sigwatch_source_lag",
            "How far a source's reader is behind its input: bytes for files, seconds for the "
            "journal, records for the kernel log.", ["source", "unit"], registry=r)
        self.source_last_read = Gauge(
            "sigwatch_source_last_read_timestamp_seconds",
            "Unix time a source last read anything (0 = never).", ["source"], registry=r)
        self.build_info = Info(
            "sigwatch_build", "sigwatch version.", registry=r)
        self.build_info.info({"version": version, "revision": revision,
                              "prefilter": prefilter})
        # HTTP listener (sigwatch.web): connections that ended badly, by a closed set of reasons
        # (busy = over the worker pool and queue, answered 503; timeout = a slow client cut off;
        # tls_error = failed handshake or clear text on the TLS port; disconnect = client left).
        # Memory is not the log writer's to take: text beyond DetectionCaps, per field.
        self.detection_bytes_cut = Counter(
            "sigwatch_detection_bytes_cut",
            "UTF-8 bytes of text, context, captures or about cut from detections to stay "
            "within the per-detection caps (the cut is marked in the detection).",
            ["field"], registry=r)
        for cut_field in CUT_FIELDS:
            self.detection_bytes_cut.labels(cut_field)
        self.http_connections_dropped = Counter(
            "sigwatch_http_connections_dropped",
            "HTTP connections that ended without a normal response, by reason.",
            ["reason"], registry=r)
        for reason in ("busy", "timeout", "tls_error", "disconnect"):
            self.http_connections_dropped.labels(reason)
        # --- Detectors beyond signatures (issue 13): training progress and novel errors. ---
        # Labels: the configured source name and the progress extractor that read the line
        # (a closed set: built-in names plus the configured user extractors). Template ids
        # are never labels. The detectors create their series when a stream of a source opens.
        self.novel_errors = Counter(
            "sigwatch_novel_errors",
            "Error-looking lines whose template was never seen on this node (novel_error).",
            ["source"], registry=r)
        self.step_seconds = Gauge(
            "sigwatch_training_step_seconds",
            "Latest training step time read from a progress line (or its it/s rate).",
            ["source", "kind"], registry=r)
        self.throughput = Gauge(
            "sigwatch_training_throughput",
            "Latest training throughput read from a progress line, in the trainer's own unit "
            "(samples, tokens or images per second).",
            ["source", "kind"], registry=r)
        self.progress_lines = Counter(
            "sigwatch_training_progress_lines", "Training progress lines recognised.",
            ["source", "kind"], registry=r)
        # Direct paging (sinks/alertmanager.py; the deploy/prometheus rules use them). An alert is
        # one incident (signature, node, source) posted to every Alertmanager replica; every
        # series below exists at zero from start-up so the shipped rules see the first change.
        self.alerts_raised = Counter(
            "sigwatch_alerts_raised",
            "Incidents opened as alerts (repeats of an open incident are not counted).",
            ["severity"], registry=r)
        self.alerts_delivered = Counter(
            "sigwatch_alerts_delivered",
            "Alerts whose firing state reached at least one Alertmanager replica (once each).",
            ["severity"], registry=r)
        self.alerts_dropped = Counter(
            "sigwatch_alerts_dropped",
            "Alerts given up before they were resolved (queue_full: over the bounded queue; "
            "unencodable or rejected: an alert that could not be sent, dropped so that it "
            "does not block the others).",
            ["reason"], registry=r)
        self.alert_posts = Counter(
            "sigwatch_alertmanager_posts",
            "POSTs of the alert set to an Alertmanager replica (attempts).", registry=r)
        self.alert_post_failures = Counter(
            "sigwatch_alertmanager_post_failures",
            "POSTs to an Alertmanager replica that failed, by reason (retried with backoff).",
            ["reason"], registry=r)
        self.alerts_firing = Gauge(
            "sigwatch_alerts_firing", "Incidents firing now (sent to Alertmanager).",
            registry=r)
        self.alerts_undelivered = Gauge(
            "sigwatch_alerts_undelivered",
            "Firing alerts no Alertmanager replica has accepted yet (kept on disk).",
            registry=r)
        self.alertmanager_last_success = Gauge(
            "sigwatch_alertmanager_last_success_timestamp_seconds",
            "Unix time of the last POST an Alertmanager replica accepted (0 = never).",
            registry=r)
        for sev in ("info", "warning", "error", "critical"):
            self.alerts_raised.labels(sev)
            self.alerts_delivered.labels(sev)
        for reason in ("queue_full", "unencodable", "rejected"):
            self.alerts_dropped.labels(reason)
        for reason in ("connect", "timeout", "rejected", "server_error"):
            self.alert_post_failures.labels(reason)
        # Sources beyond files and watching that scales (issue 11). Directories watched with
        # inotify (only those a glob can match), trees that fell back to polling after a
        # notification queue overflow, globs matching no file (per configured source name),
        # and abnormal exits of commands run by ``sigwatch exec``.
        self.watched_directories = Gauge(
            "sigwatch_watched_directories",
            "Directories watched for changes with inotify (only those a glob can match).",
            registry=r)
        self.watch_overflows = Counter(
            "sigwatch_watch_overflows",
            "inotify event queue overflows; the tree is then polled instead of watched.",
            registry=r)
        self.watch_trees = Gauge(
            "sigwatch_watch_trees",
            "Watched glob trees by how changes are noticed (inotify, or polling after an "
            "overflow or a watch limit).", ["mode"], registry=r)
        for mode in ("inotify", "polling"):
            self.watch_trees.labels(mode)
        self.globs_unmatched = Gauge(
            "sigwatch_globs_unmatched",
            "Configured globs of a source that match no file right now.", ["source"],
            registry=r)
        self.exec_exits = Counter(
            "sigwatch_exec_exits",
            "Commands run by sigwatch exec that ended, by how (ok, status, signal).",
            ["how"], registry=r)
        for how in ("ok", "status", "signal"):
            self.exec_exits.labels(how)

        # --- Hostile machine (issue 10): the event log under a full disk or logrotate, files
        # over max_files, prefilter forms that could not be bounded. All at zero from start-up.
        self.eventlog_write_errors = Counter(
            "sigwatch_eventlog_write_errors",
            "Failed writes to the event log (disk full, I/O error); the records are kept and "
            "retried, and sources are not read meanwhile.", registry=r)
        self.eventlog_blocked = Gauge(
            "sigwatch_eventlog_blocked",
            "1 while reading is paused because the event log cannot be written.", registry=r)
        self.eventlog_reopens = Counter(
            "sigwatch_eventlog_reopens",
            "Event log reopened: on SIGHUP, or because it was deleted, replaced or truncated "
            "under the daemon.", ["reason"], registry=r)
        for reason in EVENTLOG_REOPEN_REASONS:
            self.eventlog_reopens.labels(reason)
        self.data_loss_possible = Counter(
            "sigwatch_data_loss_possible",
            "Places where data may have been lost but cannot be known (a file truncated with "
            "no copy next to it: lines written after the last look, if any). Kept apart from "
            "data_loss_events, which counts only bytes known lost.", ["source", "reason"],
            registry=r)
        self.files_not_followed = Gauge(
            "sigwatch_files_not_followed",
            "Files matching the globs that are not followed because max_files was reached.",
            ["source"], registry=r)

        # --- Node faults and Slurm actions (issue 24). A fault is opened by a detection the
        # policy acts on and lives until a recovery signal; every drain and resume sigwatch
        # takes, observes (observe mode) or refuses (circuit breaker, someone else's drain) is
        # counted by outcome. All series exist at zero from start-up (declare_faults).
        self.faults_open = Gauge(
            "sigwatch_faults_open",
            "Node faults open now, by state (firing, recovering after a reboot, escalated).",
            ["state"], registry=r)
        self.faults_opened = Counter(
            "sigwatch_faults_opened", "Node faults opened, by owner of the signature.",
            ["owner"], registry=r)
        self.faults_cleared = Counter(
            "sigwatch_faults_cleared",
            "Node faults cleared, by recovery signal (reboot and clean window, recovery line, "
            "manual clear).", ["how"], registry=r)
        self.policy_decisions = Counter(
            "sigwatch_policy_decisions",
            "What the policy made of detections (none, counting, opened, folded, duplicate, "
            "stale_boot, stale_cleared, ...).", ["decision"], registry=r)
        self.node_actions = Counter(
            "sigwatch_node_actions",
            "Drains and resumes of this node in Slurm: taken, observed (observe mode), refused "
            "(circuit breaker) or left alone (someone else's drain), by outcome.",
            ["action", "outcome"], registry=r)
        self.drain_breaker_open = Gauge(
            "sigwatch_drain_breaker_open",
            "1 while the circuit breaker refuses this node's drain (too many nodes drained by "
            "sigwatch, or too many drains this hour).", registry=r)
        self.policy_mode = Gauge(
            "sigwatch_policy_mode", "1 for the policy mode in force (observe or act).",
            ["mode"], registry=r)
        self.source_up = Gauge(
            "sigwatch_source_up",
            "1 while a source can read its input, 0 while it cannot (the monitor is blind "
            "there: unreadable files, a journal reader that died, a missing pipe).",
            ["source"], registry=r)

        # --- Jobs and incidents (issue 21). Job ids label only the gauges of ``JobCollector``
        # (jobs active now); these counters have closed label sets.
        self.job_series_refused = Counter(
            "sigwatch_job_series_refused",
            "Jobs, ranks or process groups not tracked because a cap was reached (64 active "
            "jobs, 1024 ranks per job, 16 process groups per rank).", ["what"], registry=r)
        for what in JOB_REFUSALS:
            self.job_series_refused.labels(what)
        self.incidents_opened = Counter(
            "sigwatch_incidents_opened",
            "Incidents opened (a repeat of a signature in an open incident is folded into it "
            "and not counted here; sigwatch_detections_total counts every occurrence).",
            ["severity"], registry=r)
        for sev in ("info", "warning", "error", "critical"):
            self.incidents_opened.labels(sev)

    def declare_faults(self, decisions: Iterable[str],
                       actions: Iterable[tuple[str, str]], mode: str) -> None:
        """Every fault, decision and action series at zero; the mode gauge set."""
        for state in ("firing", "recovering", "escalated"):
            self.faults_open.labels(state)
        for owner in ("node", "fabric", "unknown"):
            self.faults_opened.labels(owner)
        for how in ("reboot", "recovery", "manual"):
            self.faults_cleared.labels(how)
        for decision in decisions:
            self.policy_decisions.labels(decision)
        for action, outcome in actions:
            self.node_actions.labels(action, outcome)
        for name in ("observe", "act"):
            self.policy_mode.labels(name).set(1 if name == mode else 0)

    def declare_input_kinds(self, files: Iterable[str], kmsg: Iterable[str]) -> None:
        """Series at zero for file sources (unmatched globs) and kernel-log loss."""
        for source in files:
            self.globs_unmatched.labels(source)
        for source in kmsg:
            self.data_loss.labels(source, "kmsg_overrun")
    def declare_signatures(
        self, signatures: Iterable[tuple[str, ...]], sources: Iterable[str],
    ) -> None:
        """Create every (signature, source) series at zero so ``increase()`` sees the first hit."""
        source_list = list(sources)
        for sig, *severities in signatures:
            self.regex_timeouts.labels(sig)
            for source in source_list:
                for severity in severities:  # its own, and the one it takes as fallout
                    self.detections.labels(sig, severity, source)
                self.last_detection.labels(sig, source)

    def declare_sinks(self, sinks: Iterable[str]) -> None:
        """Create the per-sink series at zero."""
        for sink in sinks:
            self.sink_errors.labels(sink)
            self.sink_dropped.labels(sink)
            self.sink_queue_depth.labels(sink)

    def declare_sources(self, sources: Iterable[str]) -> None:
        """Create the per-source input series at zero."""
        for source in sources:
            for metric in (self.lines, self.bytes_read, self.lines_truncated, self.invalid_utf8,
                           self.rotations, self.truncations, self.nul_bytes_skipped):
                metric.labels(source)
            self.files_watched.labels(source)
            self.source_last_read.labels(source)
            self.source_up.labels(source).set(1)
            for reason in DATA_LOSS_REASONS:
                self.data_loss.labels(source, reason)
            for reason in FILE_ERROR_REASONS:
                self.file_errors.labels(source, reason)
            self.files_not_followed.labels(source)
            self.data_loss_possible.labels(source, "truncated")
            for reason in FILE_REFUSAL_REASONS:
                self.file_errors.labels(source, reason)


JOB_REFUSALS = ("job", "rank", "pg")
"""Every ``what`` of ``sigwatch_job_series_refused_total``."""

JOB_GAUGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "sigwatch_job_active": (
        ("1 while the job is active on this node (a line from one of its streams within "
        "[jobs] idle_seconds, one of them still followed)."), ("job",)),
    "sigwatch_job_fault_first_seconds": (
        ("Unix time of the first detection (severity >= warning) of a signature in the job on "
        "this node: the line's own time when it has one."),
        ("job", "rank", "signature", "owner", "severity")),
    "sigwatch_job_fault_info": (
        ("1 per first fault of a signature in the job: its line and the signature's fix "
        "(control characters removed, each cut to 200 characters; dropped with the job)."),
        ("job", "rank", "signature", "owner", "severity", "line", "fix")),
    "sigwatch_job_rank_collective_seq": (
        ("The NCCL watchdog's sequence numbers for a rank and process group: timed_out (the "
        "work it reported failed or timed out), last_enqueued, last_completed."),
        ("job", "rank", "pg", "kind")),
    "sigwatch_job_rank_collective_report_seconds": (
        ("Unix time of the rank's latest watchdog report of a failed or timed-out work, with "
        "the work's op type."), ("job", "rank", "pg", "op")),
    "sigwatch_job_rank_step": (
        "The last training step the rank printed.", ("job", "rank")),
    "sigwatch_job_rank_step_seconds": (
        "The rank's latest step time in seconds.", ("job", "rank")),
    "sigwatch_job_rank_last_progress_seconds": (
        "Unix time of the rank's last progress line.", ("job", "rank")),
}
"""Gauges of the jobs active now: name -> (help, label names after ``node``)."""


class JobCollector(Collector):
    """The job gauges, computed at scrape time from the job book's rows.

    A custom collector rather than labelled ``Gauge`` children: a job that ends is simply
    absent from the next rows, so its series disappear without bookkeeping of label sets.
    ``rows`` returns ``(metric name, label values after node, value)``.
    """

    def __init__(self, node: str,
                 rows: Callable[[], Iterable[tuple[str, tuple[str, ...], float]]]) -> None:
        self.node = node
        self.rows = rows

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return list(self._families())

    def _families(self) -> Iterator[GaugeMetricFamily]:
        for name, (doc, labels) in JOB_GAUGES.items():
            yield GaugeMetricFamily(name, doc, labels=["node", *labels])

    def collect(self) -> Iterable[GaugeMetricFamily]:
        families = {f.name: f for f in self._families()}
        for name, labels, value in self.rows():
            family = families.get(name)
            if family is not None:
                family.add_metric([self.node, *labels], value)
        return list(families.values())
