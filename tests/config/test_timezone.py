"""timezone: one resolver for the config's zone and a schedule's own."""

from __future__ import annotations

from datetime import tzinfo
from zoneinfo import ZoneInfo

import pytest

from tmy.config.timezone import concrete, zone_of
from tmy.errors import ConfigError, RuleError


def test_local_is_none_and_a_name_is_its_zone() -> None:
    assert zone_of(None) is None and zone_of("") is None and zone_of("local") is None
    assert zone_of("Asia/Shanghai") == ZoneInfo("Asia/Shanghai")


@pytest.mark.parametrize("error", [ConfigError, RuleError])
def test_an_unknown_name_raises_the_error_asked_for(error: type[Exception]) -> None:
    with pytest.raises(error) as caught:
        zone_of("Mars/Olympus", error)  # type: ignore[arg-type]
    assert "unknown timezone 'Mars/Olympus' (use an IANA name like 'Asia/Shanghai')" in str(
        caught.value
    )


def test_concrete_gives_the_machine_zone_for_local() -> None:
    assert concrete(ZoneInfo("UTC")) == ZoneInfo("UTC")
    assert isinstance(concrete(None), tzinfo)
