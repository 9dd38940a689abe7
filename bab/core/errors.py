"""The one kind of error the command line reports as bad input.

``python -m bab`` checks a command's input (its files, values and flags) before any work starts; what those checks
refuse is a ``BadInput``, printed as one line with exit code 2. Anything raised once the work has begun (a torch
error after hours of training, a bug) is a failure: its traceback and exit code 1, never a one-line "bad input".
"""

from __future__ import annotations

import contextlib

# What the library's own checks raise for a value, a file or a name it refuses: inside ``checking()`` they are bad
# input; outside it, the same classes are failures.
CHECKED_KINDS = (ValueError, TypeError, OSError, LookupError)


class BadInput(ValueError):
    """Input a command refuses before any work starts: a file, a value, a flag. The message says what to fix. A
    ``ValueError``, so a caller of the library that catches ValueError keeps catching it."""


@contextlib.contextmanager
def checking(kinds: tuple[type[BaseException], ...] = CHECKED_KINDS):
    """The block checks input and does no work: an error of ``kinds`` it raises becomes ``BadInput`` (the cause
    chained), so the command line reports it as bad input. Use it around checks only, never around the work."""
    try:
        yield
    except BadInput:
        raise
    except kinds as exc:
        raise BadInput(str(exc)) from exc
