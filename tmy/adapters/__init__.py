"""Chat platforms: each turns its events into Messages and sends Replies back.

The contract is :class:`tmy.types.Adapter`; every platform's public entry
(``tmy.adapters.http``, ``openai``, ``onebot``, ``discord_adapter``,
``telegram``) has ``from_settings(settings, store=None)``, the adapter or None.
"""
