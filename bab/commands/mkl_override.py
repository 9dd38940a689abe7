"""``mkl-override``: print the ``LD_PRELOAD`` that gives MKL its AVX-512 kernels on an AMD CPU (``bab.core.blas``), for
a user who opts in by hand; ``$LD_PRELOAD`` unchanged where the override does not apply.

    LD_PRELOAD="$(python -m bab mkl-override)" python my_script.py
"""

from __future__ import annotations

import os


def register(sub) -> None:
    p = sub.add_parser("mkl-override", help="print the LD_PRELOAD value that gives MKL its AVX-512 kernels on an AMD "
                                            "CPU (bab.core.blas): LD_PRELOAD=\"$(python -m bab mkl-override)\" CMD",
                       description="Builds bab.core.blas's library where it applies (an AMD x86-64 CPU with AVX-512, "
                                   "unless $BAB_MKL_VENDOR_SHIM=0; a C compiler needed) and prints $LD_PRELOAD with "
                                   "it first. Elsewhere prints $LD_PRELOAD as it is, so the same line works "
                                   "everywhere.")
    p.set_defaults(run=_print_preload)


def _print_preload(args) -> int:
    from bab.core.blas import preload_env
    from bab.core.errors import checking

    with checking():  # a bad $BAB_MKL_VENDOR_SHIM
        value = preload_env().get("LD_PRELOAD", os.environ.get("LD_PRELOAD", ""))
    print(value)
    return 0
