"""``record``: the committed record (reports/record/), rebuilt lane by lane (``bab.report.lanes``).

    python -m bab record plan                   # every lane: landed (commit, seconds, machine), stale or not run yet
    python -m bab record next --lanes 2 --commit  # run the next two lanes beside each other, landing each as it ends
    python -m bab record next --lanes 6 --jobs 2 --commit  # six, two at a time: the next starts as one lands
    python -m bab record pages                  # rebuild the front page from the landed lanes (after a claims change)
"""

from __future__ import annotations

from pathlib import Path

from bab.core.errors import BadInput, checking


def register(sub) -> None:
    p = sub.add_parser("record", help="the committed record, reports/record/: its lanes (a notebook at a seed, an "
                                      "hour on one core each), which have landed, and running the next ones")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    plan = actions.add_parser("plan", help="every lane and where it stands: landed (commit, seconds, machine), stale "
                                           "(which fingerprint changed) or not run yet")
    _add_folder(plan)
    plan.set_defaults(run=run_plan)
    step = actions.add_parser("next", help="run the next lanes not landed (or stale), each landing in the record "
                                           "folder as it ends")
    _add_folder(step)
    step.add_argument("--lanes", type=int, default=2, help="how many of the next lanes to run (default: 2)")
    step.add_argument("--jobs", type=int, default=None,
                      help="lanes at once, one core each; the next starts as one lands (default: --lanes, at most 2)")
    step.add_argument("--only", default=None, help="comma-separated lanes to run instead, e.g. 02/7,05/13")
    step.add_argument("--commit", action="store_true", help="commit the record folder after each lane lands")
    step.add_argument("--dry-run", action="store_true", help="say which lanes would run, run none")
    step.add_argument("--no-mkl-override", dest="mkl_override", action="store_false",
                      help="the kernels leave MKL's vendor check alone (bab.core.blas)")
    step.set_defaults(run=run_next)
    pages = actions.add_parser("pages", help="run nothing: rebuild the front page from the lanes that have landed")
    _add_folder(pages)
    pages.set_defaults(run=run_pages)


def _add_folder(parser) -> None:
    parser.add_argument("--folder", default=None, help="the record folder (default: reports/record of the checkout)")
    parser.add_argument("--checkout", default=".", help="the source checkout whose notebooks run (default: .)")


def _where(args) -> tuple[Path, Path]:
    checkout = Path(args.checkout).resolve()
    if not (checkout / "notebooks").is_dir() or not (checkout / "bab").is_dir():
        raise BadInput(f"{checkout} is not a bab source checkout (no notebooks/ and bab/): pass --checkout")
    from bab.report.lanes.plan import RECORD_FOLDER

    return checkout, Path(args.folder).resolve() if args.folder else checkout / RECORD_FOLDER


def _states(checkout: Path, folder: Path):
    from bab.report.lanes.plan import lane_states, record_lanes
    from bab.report.lanes.run import Fingerprints

    return lane_states(folder, Fingerprints(checkout), record_lanes())


def run_plan(args) -> int:
    from bab.report.pages.index import wall_time

    with checking():
        checkout, folder = _where(args)
    states = _states(checkout, folder)
    print(f"{'lane':12s} {'state':12s} {'wall time':>14s} {'core time':>14s} {'+ from cache':>14s}  "
          f"{'trained at':12s} machine")
    for s in states:
        record = s.record
        print(f"{s.lane.label:12s} {s.state:12s} {wall_time(record.get('seconds')):>14s} "
              f"{wall_time(record.get('cpu_seconds')):>14s} {wall_time(record.get('cached_seconds') or None):>14s}  "
              f"{record.get('commit') or '':12s} {record.get('machine') or ''}"
              + (f"  (changed: {', '.join(s.changed)})" if s.changed else ""))
    landed = [s for s in states if s.state == "landed"]
    seconds = sum(core_seconds(s.record) for s in landed)
    left = len(states) - len(landed)
    print(f"\n{len(landed)} of {len(states)} lanes landed ({seconds / 3600:.1f} core-hours); {left} to run"
          + (": python -m bab record next --lanes 2 --commit" if left else ""))
    if left:
        print(time_left(states))
    return 0


def core_seconds(record: dict) -> float:
    """A landed lane's time on one core: its kernel's CPU time (its wall time where that was not measured), plus what
    the models and measurements it took from the run cache cost the run that made them."""
    return (record.get("cpu_seconds") or record.get("seconds") or 0) + (record.get("cached_seconds") or 0)


def time_left(states) -> str:
    """The core-hours the lanes not landed should take, each at its notebook's landed lanes' median."""
    import statistics

    by_notebook: dict[str, list[float]] = {}
    for s in states:
        if core_seconds(s.record):
            by_notebook.setdefault(s.lane.notebook.stem, []).append(core_seconds(s.record))
    waiting = [s for s in states if s.state != "landed"]
    known = [statistics.median(by_notebook[s.lane.notebook.stem]) for s in waiting
             if s.lane.notebook.stem in by_notebook]
    unknown = len(waiting) - len(known)
    return (f"about {sum(known) / 3600:.1f} core-hours for {len(known)} of them, at their notebooks' landed lanes' "
            f"median" + (f"; {unknown} more, of notebooks with no lane landed yet" if unknown else ""))


def run_next(args) -> int:
    from bab.report.lanes.plan import next_lanes
    from bab.report.lanes.run import run_lanes

    with checking():
        checkout, folder = _where(args)
        if args.lanes < 1:
            raise BadInput(f"--lanes must be at least 1, got {args.lanes}")
        jobs = min(args.lanes, 2) if args.jobs is None else args.jobs
        if jobs < 1:
            raise BadInput(f"--jobs must be at least 1, got {args.jobs}")
    states = _states(checkout, folder)
    with checking():
        lanes = _chosen(states, args.only) if args.only else next_lanes(states, args.lanes)
    if not lanes:
        print("every lane has landed at these fingerprints: nothing to run")
        return 0
    print("next: " + ", ".join(lane.label for lane in lanes))
    if args.dry_run:
        return 0
    return 1 if run_lanes(lanes, checkout, folder, jobs=jobs, commit=args.commit,
                          mkl_override=args.mkl_override) else 0


def _chosen(states, only: str):
    by_key = {f"{s.lane.notebook.number}/{s.lane.seed}": s.lane for s in states}
    wanted = [part.strip() for part in only.split(",") if part.strip()]
    unknown = [w for w in wanted if w not in by_key]
    if unknown or not wanted:
        raise BadInput(f"--only {only!r}: lanes are named NN/SEED, one of {', '.join(by_key)}")
    return [by_key[w] for w in wanted]


def run_pages(args) -> int:
    from bab.report.lanes.landing import front_page

    with checking():
        checkout, folder = _where(args)
        if not (folder / "lanes").is_dir():
            raise BadInput(f"{folder} holds no landed lane (lanes/): run python -m bab record next first")
    print(front_page(folder, _states(checkout, folder), checkout))
    return 0
