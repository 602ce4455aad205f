"""tmy as an MCP server: the rules marked ``tool:`` offered to MCP clients.

Two ways in, one server (:mod:`tmy.mcpserve.server`, the SDK's lowlevel ``Server``):

* ``python run.py mcp-serve`` — stdio, for a client that starts the process (Claude
  Desktop, an IDE); the caller is ``--user``/``--chat`` (``PLATFORM`` ``mcp`` unless
  ``--platform``), an admin when ``admins:`` names them or with ``--admin``
  (:mod:`tmy.mcpserve.stdio`);
* ``/mcp`` on the daemon's listener — streamable HTTP behind the API keys, the caller
  being the key's identity as on ``/v1/*`` (:mod:`tmy.mcpserve.http`, bridged from
  aiohttp to the SDK's ASGI side by :mod:`tmy.mcpserve.bridge`).

Which rules a caller sees and may run, and how a call runs, is :mod:`tmy.mcpserve.tools`:
a rule whose filters (``admin_only``, ``platforms``, ``chats``, ``private`` …) do not
admit the caller is neither listed nor run.
"""

from tmy.mcpserve.extension import EXTENSION, state_of
from tmy.mcpserve.tools import PLATFORM, Caller

__all__ = ["EXTENSION", "PLATFORM", "Caller", "state_of"]
