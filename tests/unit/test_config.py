"""The daemon config: strict, with defaults that run on their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from sigwatch.config import DEFAULT_LISTEN, DEFAULT_WATCH, load_config
from sigwatch.errors import ConfigError


class TestConfig:
    def test_defaults_need_no_file(self) -> None:
        """With no config file the daemon watches the documented location on localhost."""
        config = load_config(None)

        assert [DEFAULT_WATCH] == config.sources[0].paths
        assert DEFAULT_LISTEN == config.listen
        assert DEFAULT_LISTEN.startswith("127.0.0.1:")

    def test_flags_override_the_file(self, tmp_path: Path) -> None:
        """Command-line values win over the file."""
        path = tmp_path / "c.toml"
        path.write_text('listen = "127.0.0.1:1111"\n')

        config = load_config(path, listen="127.0.0.1:2222")

        assert "127.0.0.1:2222" == config.listen

    def test_unknown_key_names_file_and_field(self, tmp_path: Path) -> None:
        """Typos in a config are errors."""
        path = tmp_path / "c.toml"
        path.write_text('[[sources]]\nname = "a"\npaths = ["/x"]\nstart = "end"\n')

        with pytest.raises(ConfigError) as info:
            load_config(path)

        assert str(path) == info.value.file
        assert "sources[0].start" == info.value.field
        assert "unknown key" == info.value.reason

    def test_malformed_toml_is_reported(self, tmp_path: Path) -> None:
        """A broken file names itself and the parser's reason."""
        path = tmp_path / "c.toml"
        path.write_text("listen = ")

        with pytest.raises(ConfigError, match="invalid TOML"):
            load_config(path)

    def test_listen_must_be_host_port(self, tmp_path: Path) -> None:
        """An address without a port is rejected before anything starts."""
        path = tmp_path / "c.toml"
        path.write_text('listen = "localhost"\n')

        with pytest.raises(ConfigError) as info:
            load_config(path)

        assert "listen" == info.value.field

    def test_duplicate_source_names_are_rejected(self, tmp_path: Path) -> None:
        """Source names are metric labels and must be unique."""
        path = tmp_path / "c.toml"
        path.write_text('[[sources]]\nname = "a"\npaths = ["/x"]\n'
                        '[[sources]]\nname = "a"\npaths = ["/y"]\n')

        with pytest.raises(ConfigError, match="duplicate source name"):
            load_config(path)


class TestNodeFromTheEnvironment:
    """A DaemonSet sets NODE_NAME from spec.nodeName; the config and --node can refer to it."""

    @pytest.mark.parametrize("reference", ["${NODE_NAME}", "$NODE_NAME",
                                           "${NODE_NAME:-fallback}"])
    def test_a_reference_takes_the_variables_value(self, tmp_path: Path, monkeypatch,
                                                   reference: str) -> None:
        monkeypatch.setenv("NODE_NAME", "gpu-node-17")
        path = tmp_path / "c.toml"
        path.write_text(f'node = "{reference}"\n')

        assert "gpu-node-17" == load_config(path).node
        assert "gpu-node-17" == load_config(None, node=reference).node

    def test_an_unset_variable_is_an_error_naming_file_field_and_variable(
            self, tmp_path: Path, monkeypatch) -> None:
        """Never silently the pod's host name."""
        monkeypatch.delenv("NODE_NAME", raising=False)
        path = tmp_path / "c.toml"
        path.write_text('node = "${NODE_NAME}"\n')

        with pytest.raises(ConfigError, match=r"c\.toml: node: .*NODE_NAME is not set"):
            load_config(path)

    def test_a_default_applies_when_the_variable_is_unset(self, monkeypatch) -> None:
        monkeypatch.delenv("NODE_NAME", raising=False)

        assert "spare" == load_config(None, node="${NODE_NAME:-spare}").node

    def test_a_plain_name_is_kept(self) -> None:
        assert "gpu-017" == load_config(None, node="gpu-017").node


def test_the_documented_config_example_is_valid() -> None:
    """The example in docs/configuration.md must load as written."""
    import tomllib

    from sigwatch.config import Config

    text = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")
    block = text[text.index("## Config file (TOML)"):]
    block = block[block.index("```toml") + 7:]
    Config.model_validate(tomllib.loads(block[:block.index("```")]))
