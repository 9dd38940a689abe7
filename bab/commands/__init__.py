"""The command line's commands, one module each (as transformers' ``commands/``), registered here in the order
``--help`` lists them. Each module's ``register(subparsers)`` adds its parser and sets ``run`` (the function that
runs it). A command checks its input first, raising ``bab.core.errors.BadInput`` (printed as one line, exit code 2)
for what it refuses, then works; what the work raises is a failure (traceback, exit code 1).

The modules are imported on first use of ``COMMANDS``: several import torch, and ``python -m bab`` first decides
whether MKL's vendor check is answered in its process (``bab.core.blas``), which must happen before torch loads.
"""

import importlib

NAMES = ("report", "record", "notebooks", "claims", "cache", "bench", "fit", "train", "evaluate", "mkl_override")


def __getattr__(name: str):
    if name == "COMMANDS":
        return tuple(importlib.import_module(f"bab.commands.{module}") for module in NAMES)
    raise AttributeError(f"module 'bab.commands' has no attribute {name!r}")
