"""TRANSITION(A2): empty; deleted once tmy/cli.py (B) stops importing it in COMMAND_MODULES.

Long-term memory is :data:`tmy.memory.EXTENSION` now: nothing is installed by importing.
"""
