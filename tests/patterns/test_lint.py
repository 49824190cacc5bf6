"""`sigwatch patterns lint` gates the library, and catches what it promises to catch."""

from __future__ import annotations

from collections.abc import Callable

from sigwatch.checks.lint import lint
from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns

GOOD = """
id = "{id}"
title = "Good One"
severity = "error"
owner = "user"
description = "Detects a good one."
falsepositives = ["Unlikely"]
references = ["https://example.org/issue/1"]
[match]
regex = '{regex}'
[remediation]
summary = "Fix it."
action = "restart_job"
[[examples]]
kind = "match"
text = 'x {text} y'
[[examples]]
kind = "match"
text = '[rank1]: {text}'
[[examples]]
kind = "no_match"
text = 'all good'
"""


def _codes(root) -> list[str]:
    patterns, errors = load_patterns([root])
    return sorted({f.code for f in lint(patterns, errors) if f.level == "error"})


class TestLibraryLint:
    def test_built_in_library_passes_lint(self) -> None:
        """Schema, ids, examples, keywords, backtracking, wording and remediation all hold."""
        patterns, errors = load_patterns([builtin_pattern_dir()])

        findings = [f.render() for f in lint(patterns, errors) if f.level == "error"]

        assert [] == findings

    def test_no_signature_is_gated_on_a_common_literal(self) -> None:
        """P017: every regex of the library is found by a literal that leads it or by a rare
        one (training_loss_nan once cost the whole signature scan a third of its time)."""
        patterns, errors = load_patterns([builtin_pattern_dir()])

        findings = [f.render() for f in lint(patterns, errors) if f.code == "P017"]

        assert [] == findings

    def test_library_has_at_least_sixty_signatures(self) -> None:
        """The library a platform team adopts, not a demo."""
        patterns, _ = load_patterns([builtin_pattern_dir()])

        assert len(patterns) >= 60


class TestLintCatches:
    def test_a_good_file_is_clean(self, write_pattern: Callable) -> None:
        """The template itself passes, so the cases below fail for their one reason."""
        root = write_pattern("good_one", GOOD.format(id="good_one", regex="boom happened",
                                                     text="boom happened"))

        assert [] == _codes(root)

    def test_catastrophic_backtracking_is_caught(self, write_pattern: Callable) -> None:
        """A nested quantifier that explodes on a near-miss input fails P006."""
        root = write_pattern("good_one", GOOD.format(
            id="good_one", regex="boom (a|a)*$", text="boom aaaa"))

        assert "P006" in _codes(root)

    def test_a_regex_gated_on_a_common_literal_is_a_cost_warning(
            self, write_pattern: Callable) -> None:
        """Two top-level branches leave the prefilter only 'nan' and ' is ' to gate on (P017);
        the same branches after one leading literal, or a prefregex, are found cheaply."""
        def warnings(regex: str, extra: str = "") -> list[str]:
            text = GOOD.format(id="good_one", regex=regex, text="loss: nan")
            root = write_pattern("good_one", text.replace("[remediation]",
                                                          extra + "[remediation]"))
            patterns, errors = load_patterns([root])
            return [f.code for f in lint(patterns, errors) if f.level == "warning"]

        two_branches = r"(?i)(?:lm |eval )?loss\s{0,3}[:=]\s{0,3}nan| is (?:nan|infinity)"
        assert "P017" in warnings(two_branches)
        assert "P017" not in warnings(r"(?i)loss(?:\s{0,3}[:=]\s{0,3}nan| is (?:nan|infinity))")
        assert "P017" not in warnings(two_branches, "prefregex = ': nan| is nan'\n")

    def test_regex_step_without_example_is_caught(self, write_pattern: Callable) -> None:
        """A step no example exercises fails P004."""
        text = GOOD.format(id="good_one", regex="boom happened", text="boom happened")
        text = text.replace("[remediation]", "[[match.then]]\nregex = 'never shown'\n\n"
                                             "[remediation]")
        root = write_pattern("good_one", text)

        assert "P004" in _codes(root)

    def test_keyword_missing_from_a_matching_line_is_caught(
            self, write_pattern: Callable) -> None:
        """A keyword the matching lines do not hold would hide them from the prefilter."""
        text = GOOD.format(id="good_one", regex="boom happened", text="boom happened")
        text = text.replace("regex = 'boom happened'",
                            "regex = 'boom happened'\nkeywords = ['BOOM']")
        root = write_pattern("good_one", text)

        assert "P005" in _codes(root)

    def test_error_without_remediation_is_caught(self, write_pattern: Callable) -> None:
        """On-call must be handed the fix."""
        text = GOOD.format(id="good_one", regex="boom happened", text="boom happened")
        text = text.replace('summary = "Fix it."\n', "")
        root = write_pattern("good_one", text)

        assert "P011" in _codes(root)

    def test_failing_example_is_caught(self, write_pattern: Callable) -> None:
        """An example that does not behave as declared fails P012."""
        text = GOOD.format(id="good_one", regex="boom happened", text="boom happened")
        text = text.replace("text = 'all good'", "text = 'boom happened'")
        root = write_pattern("good_one", text)

        assert "P012" in _codes(root)

    def test_error_without_owner_is_caught(self, write_pattern: Callable) -> None:
        """An error or critical signature must say whose fault it is (P015)."""
        text = GOOD.format(id="good_one", regex="boom happened", text="boom happened")
        root = write_pattern("good_one", text.replace('owner = "user"\n', ""))

        assert ["P015"] == _codes(root)

    def test_warning_without_owner_is_clean(self, write_pattern: Callable) -> None:
        """Below error the owner may be left out; it then reads as unknown."""
        text = GOOD.format(id="good_one", regex="boom happened", text="boom happened")
        root = write_pattern("good_one", text.replace('owner = "user"\n', "").replace(
            'severity = "error"', 'severity = "warning"'))

        assert [] == _codes(root)

    def test_owner_outside_the_closed_set_is_a_schema_error(
            self, write_pattern: Callable) -> None:
        text = GOOD.format(id="good_one", regex="boom happened", text="boom happened")
        root = write_pattern("good_one", text.replace('owner = "user"', 'owner = "gpu"'))

        assert ["P001"] == _codes(root)

    def test_id_must_equal_file_name(self, write_pattern: Callable) -> None:
        """The file is found by its id."""
        root = write_pattern("other_name", GOOD.format(
            id="good_one", regex="boom happened", text="boom happened"))

        assert "P002" in _codes(root)


def test_catalogue_is_up_to_date(library) -> None:
    """patterns/README.md is what `sigwatch patterns catalogue` generates (run `make catalogue`)."""
    from sigwatch.checks.catalogue import render_catalogue  # noqa: PLC0415

    readme = builtin_pattern_dir() / "README.md"

    assert render_catalogue(library) == readme.read_text(encoding="utf-8")
