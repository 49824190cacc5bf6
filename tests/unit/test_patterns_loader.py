"""Loading signature files: strict schema, every error named by file, field and reason."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sigwatch.patterns.compiled import derive_keywords
from sigwatch.patterns.loader import load_patterns

MINIMAL = """
id = "quick_one"
title = "Quick One"
severity = "warning"
[match]
regex = 'something (bad|worse) happened'
"""


class TestLoading:
    def test_file_with_only_required_fields_loads(self, write_pattern: Callable) -> None:
        """Users write quick ones: id, title, severity and match.regex are enough."""
        root = write_pattern("quick_one", MINIMAL)

        patterns, errors = load_patterns([root])

        assert [] == errors
        assert ["quick_one"] == [s.id for s in patterns.signatures]

    def test_unknown_key_is_an_error_naming_the_field(self, write_pattern: Callable) -> None:
        """A typo is not silently ignored."""
        root = write_pattern("quick_one", "severty = 'error'\n" + MINIMAL)

        _, errors = load_patterns([root])

        assert ["severty: unknown key"] == [f"{e.field}: {e.reason}" for e in errors]
        assert errors[0].file.endswith("quick_one.toml")

    def test_bad_regex_names_the_field_and_position(self, write_pattern: Callable) -> None:
        """The message reads like `x.toml: match.regex: missing ) at position 12`."""
        root = write_pattern("quick_one", MINIMAL.replace("(bad|worse)", "(bad|worse"))

        _, errors = load_patterns([root])

        assert 1 == len(errors)
        assert "match.regex" == errors[0].field
        assert "missing )" in errors[0].reason
        assert "position" in errors[0].reason

    def test_every_broken_file_is_reported_not_just_the_first(
            self, write_pattern: Callable) -> None:
        """Loading reports all errors at once."""
        write_pattern("a_one", "id = 'a_one'\n")
        root = write_pattern("b_two", "this is not toml")

        _, errors = load_patterns([root])

        assert 2 <= len(errors)
        assert {"a_one.toml", "b_two.toml"} == {Path(e.file).name for e in errors}

    def test_duplicate_ids_are_rejected(self, write_pattern: Callable) -> None:
        """The id is the metric label: it must be unique."""
        write_pattern("quick_one", MINIMAL, area="a")
        root = write_pattern("quick_one", MINIMAL, area="b")

        _, errors = load_patterns([root])

        assert ["id"] == [e.field for e in errors]
        assert "duplicate id" in errors[0].reason

    def test_severity_outside_the_closed_set_is_rejected(self, write_pattern: Callable) -> None:
        """Severity is a label value from a closed set."""
        root = write_pattern("quick_one", MINIMAL.replace('"warning"', '"fatal"'))

        _, errors = load_patterns([root])

        assert ["severity"] == [e.field for e in errors]

    def test_supersedes_must_name_a_loaded_signature(self, write_pattern: Callable) -> None:
        """A dangling reference is an error, not a no-op."""
        root = write_pattern("quick_one", 'supersedes = ["nope"]\n' + MINIMAL)

        _, errors = load_patterns([root])

        assert ["supersedes[0]"] == [e.field for e in errors]

    def test_binary_garbage_file_is_reported(self, tmp_path: Path) -> None:
        """A file that is not UTF-8 text gets a clear error."""
        (tmp_path / "junk.toml").write_bytes(b"\xff\xfe\x00garbage")

        _, errors = load_patterns([tmp_path])

        assert "not UTF-8" in errors[0].reason

    def test_missing_folder_is_reported(self, tmp_path: Path) -> None:
        """--patterns pointing nowhere is an error, not an empty library."""
        _, errors = load_patterns([tmp_path / "nowhere"])

        assert "no such file or directory" == errors[0].reason


class TestKeywordDerivation:
    def test_longest_required_literal_is_chosen(self) -> None:
        """A literal that every match must contain becomes the prefilter keyword."""
        assert ("NVRM: Xid (PCI:",) == derive_keywords(r"NVRM: Xid \(PCI:[^)]*\): (\d+)")

    def test_alternation_gives_one_keyword_per_branch(self) -> None:
        """Any branch may match, so each contributes a keyword."""
        assert ("out of memory", "OOM killer") == derive_keywords(r"(?:out of memory|OOM killer)")

    def test_case_insensitive_regex_gets_no_keywords(self) -> None:
        """A case-sensitive literal would miss matches, so none is derived."""
        assert () == derive_keywords(r"(?i)segfault at")

    def test_optional_parts_are_not_required(self) -> None:
        """Text under ? or * may be absent from a match."""
        assert ("Fatal Python error",) == derive_keywords(
            r"Fatal Python error(?:: Segmentation fault)?")
