"""Settings loaded from the environment and config files (tmy/config/settings.py)."""

from __future__ import annotations

import pytest

from tmy.config import load_settings
from tmy.errors import ConfigError

# -- from test_review_issue8.py (review of issue 8: defects found running the daemon for real)


def test_tmy_http_api_keys_with_no_usable_key_is_a_config_error(tmp_path) -> None:
    """An operator who sets TMY_HTTP_API_KEYS means "require a key". A value with
    only separators or blanks (a shell quoting slip: ``TMY_HTTP_API_KEYS=" , "``)
    silently yielded no keys, i.e. an open listener: fail closed, naming the variable."""
    config = tmp_path / "tmy.yaml"
    config.write_text("adapters: {http: {api_keys: [sk-from-the-file]}}\n")
    assert load_settings(config, env={}).http_api_keys == ("sk-from-the-file",)
    with pytest.raises(ConfigError, match="TMY_HTTP_API_KEYS"):
        load_settings(config, env={"TMY_HTTP_API_KEYS": " , "})
