"""The command line's commands, one module each (as transformers' ``commands/``), registered here in the order
``--help`` lists them. Each module's ``register(subparsers)`` adds its parser and sets ``run`` (the function that
runs it) and ``errors`` (the exceptions that mean bad input: printed as an error, exit code 2).
"""

from bab.commands import bench, cache, evaluate, fit, notebooks, report, train

COMMANDS = (report, notebooks, cache, bench, fit, train, evaluate)
