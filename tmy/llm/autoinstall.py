"""Importing this module installs the LLM answerer (tmy/app.py imports it once, at its end).

A module rather than a call keeps the engine's side of the contract to a single
import line; :func:`tmy.llm.install` is idempotent, so importing it again (or
calling ``install()`` yourself) changes nothing.
"""

from tmy.llm import install

install()
