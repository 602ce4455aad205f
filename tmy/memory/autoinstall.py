"""Importing this module installs long-term memory (tmy/app.py imports it once, at its end)."""

from tmy.memory import install

install()
