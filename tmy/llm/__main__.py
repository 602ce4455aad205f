"""``python -m tmy.llm ctx TEXT``: the tmy CLI with the LLM answerer's commands loaded.

``python run.py ctx`` needs tmy/cli.py to import tmy.app before it builds its
parser (that import is what registers ``ctx``); until it does, this entry
point does the import first and then hands over to the same ``main``.
"""

import sys

import tmy.app  # noqa: F401  (installs the LLM answerer, which registers ``ctx``)
from tmy.cli import main

sys.exit(main())
