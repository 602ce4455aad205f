"""The LLM answerer: an OpenAI-compatible Q&A executor with judged scenes, contracts and tools.

:data:`EXTENSION` names everything it adds (:mod:`tmy.llm.extension`): the
``LLM`` executor, the step keys ``when_llm`` / ``while_llm`` / ``max_loops``,
the rule key ``tool``, the commands ``ctx`` and ``budget``, and a lifespan
whose :class:`Runtime` the app keeps as ``services.state["llm"]`` — read it
with :func:`runtime_of`. The built-ins tuple (:mod:`tmy.builtins`) lists it;
nothing is registered by importing this package.

Long-term memory (:mod:`tmy.memory`, above this package) plugs into the
runtime's :class:`Recall` slot; this package imports nothing from it.

See docs/llm.md for the user guide.
"""

from __future__ import annotations

from tmy.llm.extension import EXTENSION, announce
from tmy.llm.runtime import Recall, Runtime, runtime_of

__all__ = ["EXTENSION", "Recall", "Runtime", "announce", "runtime_of"]
