"""How to install an optional extra's requirement, true from where the user stands.

kvcalc is not on PyPI, so ``pip install 'kvcalc[plot]'`` resolves nowhere, and a bare ``pip``
may belong to another Python than the one running kvcalc (a pipx or venv install): this
Python's own pip installs the requirement where kvcalc imports it.
"""

from __future__ import annotations

import shlex
import sys


def pip_install_hint(requirement: str) -> str:
    """``/path/to/python -m pip install 'matplotlib>=3.7'``, quoted for a POSIX shell."""
    python = shlex.quote(sys.executable) if sys.executable else "python3"
    return f"{python} -m pip install {shlex.quote(requirement)}"
