"""OneBot v11 (QQ through NapCat, LLOneBot, Lagrange): reverse or forward WebSocket.

``codec`` reads and writes messages (segment arrays, CQ-code strings),
``connection`` is one socket (events in, echo-matched actions out, silence
detection), ``adapter`` is the platform adapter the daemon builds with
:func:`from_settings`.
"""

from tmy.adapters.onebot.adapter import OneBotAdapter, OneBotConfig, from_settings

__all__ = ["OneBotAdapter", "OneBotConfig", "from_settings"]
