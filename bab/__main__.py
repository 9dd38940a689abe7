"""Command line of bab: `python -m bab report --profile smoke|quick|paper [--only 01,03]`."""

import sys

USAGE = """usage: python -m bab COMMAND [options]

commands:
  report   run the notebooks and build reports/<profile>/index.html
           (python -m bab report --help for its options)"""


def main(argv=None):
    """Dispatch to a sub-command; return the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "report":
        from bab.report import main as report_main

        return report_main(rest)
    print(f"unknown command {command!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
