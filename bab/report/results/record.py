"""RECORD.md: a report folder's claims, verdicts, setup, commits and wall times as Markdown, from its files only.

Written beside ``index.html`` by every report run (``bab.report.runner.build``), from ``results.json`` and
``runs/*.json``; ``python -m bab report pages --record-only <folder>`` rewrites it from those files, and a test
regenerates the committed paper record's and compares. Nothing in it is typed by hand.

A record goes stale when the code behind it changes after it ran: each run stores a digest of its notebook's code
cells (``code_digest``), each results file the digests of the ``bab`` modules its kernel loaded
(``bab.core.provenance.loaded_code_digests``), and the record compares both with the checkout it is written from.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from bab.core.provenance import PACKAGE_ROOT, changed_code
from bab.report.claims.counts import CLAIM_SECTIONS, claims_summary
from bab.report.results.seeds import seed_table, split_seed_stem

RECORD_NAME = "RECORD.md"


def code_digest(ipynb) -> str:
    """SHA-256 (first 16 hex digits) of a notebook's code cells, in order: what a run's numbers depend on, and not
    its prose or outputs."""
    cells = json.loads(Path(ipynb).read_text(encoding="utf-8"))["cells"]
    sources = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
               for c in cells if c["cell_type"] == "code"]
    return hashlib.sha256("\n\x00\n".join(sources).encode()).hexdigest()[:16]


def current_code(notebooks_dir) -> dict[str, str]:
    """{stem: code_digest} of the notebooks in ``notebooks_dir`` (empty when there is no such folder)."""
    folder = Path(notebooks_dir)
    return {p.stem: code_digest(p) for p in sorted(folder.glob("[0-9]*.ipynb"))} if folder.is_dir() else {}


def _code_state(run: dict, code_now: dict[str, str]) -> str:
    notebook = split_seed_stem(run.get("notebook") or "")[0]  # a seed's run ran its notebook's code
    if not run.get("code"):
        return "not recorded"
    if notebook not in code_now:
        return "–"
    return "unchanged" if code_now[notebook] == run["code"] else "**changed since: stale**"


def _number(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}g}"


def _counts(counts: dict) -> str:
    return ", ".join(f"{n} {verdict}" for verdict, n in counts.items() if n)


def _interval(claim: dict) -> str:
    """Our number of a claim with its 95% interval when it has one: "-0.55 [-1.1, 0.02]"."""
    if claim.get("ours") is None or claim.get("low") is None or claim.get("high") is None:
        return _number(claim.get("ours"))
    return f"{_number(claim['ours'])} [{_number(claim['low'])}, {_number(claim['high'])}]"


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _duration(seconds) -> str:
    if seconds is None:
        return "–"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"


def _package_state(recorded: dict | None, root) -> str:
    if not recorded:
        return "not recorded"
    changed = changed_code(recorded, root)
    if not changed:
        return f"unchanged ({len(recorded)} modules)"
    more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
    shown = ", ".join(f"`{path}`" for path in changed[:3]) + more
    return f"**changed since: stale** ({shown})"


def record_markdown(results: dict, runs: list[dict], code_now: dict[str, str] | None = None,
                    package_root=PACKAGE_ROOT) -> str:
    """The record of one report folder: ``results`` is its results.json, ``runs`` its runs/*.json records,
    ``code_now`` the notebooks' code digests now ({stem: ``code_digest``}), to mark runs whose notebook changed, and
    ``package_root`` the checkout whose ``bab`` modules are compared with those each notebook's kernel loaded."""
    code_now = code_now or {}
    package_code = results.get("code") or {}
    claims = results.get("claims") or []
    contracts = results.get("contracts") or {}
    lines = [f"# Reproduction record: profile `{results.get('profile', '?')}`", "",
             f"Generated from `results.json` ({results.get('generated_at', '?')}) and `runs/`; rewrite it with "
             f"`python -m bab report pages --record-only <this folder>`, do not edit it.", ""]
    lines += ["## Claims", ""]
    if not claims:
        with_rows = {row.get("notebook") for row in results.get("rows", [])}
        older = sorted(stem for stem, contract in contracts.items() if contract is None) or sorted(with_rows)
        lines += [f"No claim is judged: the rows of {', '.join(older) or 'no notebook'} were written before the "
                  "claims and the typed results contract existed. Rerun the notebooks to judge them.", ""]
    else:
        lines += ["Counts of the claims tested with the papers' recipes; what this package's own recipe adds is "
                  "counted apart, beneath each paper.", ""]
        for paper, by_recipe in claims_summary(claims).items():
            lines.append(f"- **{paper}**: {_counts(by_recipe['paper']) or 'no claims'}")
            if _counts(by_recipe["ours"]):
                lines.append(f"  - with our recipe (not in the paper's count): {_counts(by_recipe['ours'])}")
        lines.append("")
        for recipe, title in CLAIM_SECTIONS:
            shown = [c for c in claims if c.get("recipe", "paper") == recipe]
            if not shown:
                continue
            lines += [f"### {title}", "", "| paper | where | claim | ours [95% interval] | paper's | verdict | "
                      "holds if | why |", "|---|---|---|---|---|---|---|---|"]
            for c in shown:
                setup = c.get("setting") or c.get("setup")
                claim = c["claim"] + (f" ({setup})" if setup else "")
                covers = f" Interval: {c['covers']}." if c.get("covers") else ""
                lines.append(f"| {_cell(c['paper'])} | {_cell(c['where'])} | {_cell(claim)} | {_interval(c)} | "
                             f"{_number(c['theirs'])} | {c['verdict']} | {_cell(c.get('region') or '–')} | "
                             f"{_cell(c['why'] + covers)} |")
            lines.append("")
    lines += ["## Notebooks", "",
              "| notebook | status | wall time | finished | commit | jobs × threads | notebook code | bab code |",
              "|---|---|---|---|---|---|---|---|"]
    for run in sorted(runs, key=lambda r: r.get("notebook", "")):
        jobs = run.get("jobs")
        parallel = "–" if jobs is None else f"{jobs} × {run.get('threads', '?')}"
        package = _package_state(package_code.get(run.get("notebook")), package_root)
        lines.append(f"| {run.get('notebook')} | {run.get('status')} | {_duration(run.get('seconds'))} | "
                     f"{run.get('finished_at') or '–'} | {run.get('commit') or 'not recorded'} | {parallel} | "
                     f"{_code_state(run, code_now)} | {package} |")
    lines.append("")
    lines += seeds_section(results.get("seed_rows") or {})
    lines += ["## What the record cost", "",
              "Each run's wall time beside the training time of the models its rows measured (trained in that run or "
              "read from the run cache); the total counts each model once.", ""]
    lines += cost_table(results.get("models") or {}, runs) + [""]
    lines += models_section(results.get("models") or {})
    lines += measurements_section(results.get("measurements") or {})
    return "\n".join(lines)


def seeds_section(seed_rows: dict) -> list[str]:
    """Each row averaged over seeds, with its accuracy at every seed: the mean and std the claims read, and any
    seed that collapsed where the others did not. Nothing for a record without a notebook run at several seeds."""
    if not seed_rows:
        return []
    lines = ["## Seeds", "",
             "Notebooks whose paper tables are means over seeds ran once per seed; the claims and the front page read "
             "the mean, with the sample standard deviation over the seeds. Rows measured on the same models in "
             "every seed's run (the from-scratch seeds each run trains) are not averaged and are left out here.", ""]
    for notebook, by_seed in sorted(seed_rows.items()):
        rows_by_seed = {int(seed): rows for seed, rows in by_seed.items()}
        seeds = sorted(rows_by_seed)
        lines += [f"**{notebook}**, seeds {', '.join(map(str, seeds))}:", "",
                  "| method | budget | settings | " + " | ".join(f"seed {s}" for s in seeds) + " | mean ± std |",
                  "|---|---|---|" + "---|" * len(seeds) + "---|"]
        for row in seed_table(rows_by_seed):
            settings = ", ".join(f"{k}={v}" for k, v in sorted(row["settings"].items())) or "–"
            per_seed = " | ".join(_number(row["accuracy"][s], 4) for s in seeds)
            lines.append(f"| {_cell(row['method'])} | {_number(row['budget'])} | {_cell(settings)} | {per_seed} | "
                         f"{_number(row['mean'], 4)} ± {_number(row['std'], 2)} |")
        lines.append("")
    return lines


def cost_table(models: dict, runs: list[dict]) -> list[str]:
    """A Markdown table, one line per notebook run: its wall time and the models behind its rows (``models``:
    results.json's {run stem: models used}) with their training time, then the total with each model counted once.
    ``reports/README.md`` shows the committed record's (``write_cost_table``)."""
    lines = ["| notebook | wall time | models | their training time |", "|---|---|---|---|"]
    seconds_of = {}
    for run in sorted(runs, key=lambda r: r.get("notebook", "")):
        used = models.get(run.get("notebook"), [])
        trained = {m["run"]: m.get("train_seconds") for m in used}
        seconds_of.update(trained)
        known = [s for s in trained.values() if s is not None]
        lines.append(f"| {run.get('notebook')} | {_duration(run.get('seconds'))} | {len(trained)} | "
                     f"{_duration(sum(known)) if known else '–'} |")
    walls = [r["seconds"] for r in runs if r.get("seconds") is not None]
    known = [s for s in seconds_of.values() if s is not None]
    lines.append(f"| all | {_duration(sum(walls)) if walls else '–'} | {len(seconds_of)} | "
                 f"{_duration(sum(known)) if known else '–'} |")
    return lines


def models_section(models: dict) -> list[str]:
    """Which commits trained each notebook's models, and how many this run trained or took from the run cache."""
    lines = ["## Models", ""]
    if not models:
        return lines + ["Not recorded: the notebooks ran before their results named the models they used.", ""]
    lines += ["| notebook | models | trained in this run | from the run cache | trained at commits | training time |",
              "|---|---|---|---|---|---|"]
    lines += [_provenance_row(stem, used, "train_seconds") for stem, used in sorted(models.items())]
    lines += ["", "Each model's run, commit, start and training time are in `results.json` under `models`.", ""]
    return lines


def measurements_section(measurements: dict) -> list[str]:
    """Which commits made the slow measurements each notebook read from the run cache (``RunCache.measured``);
    nothing for a record whose notebooks computed all of theirs in the run."""
    if not measurements:
        return []
    lines = ["## Measurements from the run cache", "",
             "Slow evaluations (held-out perplexity, zero-shot scores) are cached like models, keyed by the measured "
             "run, the data, the settings, the evaluation code's version and the thread count, so they can run "
             "ahead of the notebook as the models finish training.", "",
             "| notebook | measurements | made in this run | from the run cache | measured at commits | time |",
             "|---|---|---|---|---|---|"]
    lines += [_provenance_row(stem, used, "seconds") for stem, used in sorted(measurements.items())]
    return lines + [""]


def _provenance_row(stem: str, used: list[dict], seconds_key: str) -> str:
    """One notebook's table row: how many models (or measurements) it used, made in the run, read from the cache,
    the commits that made them and the time they took."""
    commits = sorted({m.get("commit") or "not recorded" for m in used})
    seconds = [m[seconds_key] for m in used if m.get(seconds_key) is not None]
    return (f"| {stem} | {len(used)} | {sum(not m.get('cached') for m in used)} | "
            f"{sum(bool(m.get('cached')) for m in used)} | {', '.join(commits) or '–'} | "
            f"{_duration(sum(seconds)) if seconds else '–'} |")


def _runs(folder: Path) -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted((folder / "runs").glob("*.json"))]


def write_record(folder, notebooks_dir=None) -> Path:
    """Write ``folder``/RECORD.md from ``folder``/results.json and ``folder``/runs/*.json, marking the runs whose
    notebook in ``notebooks_dir`` (default: this checkout's ``notebooks/``) has changed since."""
    folder = Path(folder)
    results_path = folder / "results.json"
    if not results_path.is_file():
        raise FileNotFoundError(f"{results_path} not found: point at a report folder (e.g. reports/paper)")
    results = json.loads(results_path.read_text(encoding="utf-8"))
    path = folder / RECORD_NAME
    code_now = current_code(PACKAGE_ROOT / "notebooks" if notebooks_dir is None else notebooks_dir)
    path.write_text(record_markdown(results, _runs(folder), code_now), encoding="utf-8")
    return path


def write_cost_table(folder) -> Path | None:
    """Put the cost table of the record in ``folder`` (a finished report at profile paper) in place of the one in
    the README beside it (``reports/README.md``: from its header row to its "| all |" row), so the two never
    disagree; the README's path, or None (nothing written) where the report is of another profile or there is no
    such README or table."""
    folder = Path(folder)
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    readme = folder.parent / "README.md"
    if results.get("profile") != "paper" or not readme.is_file():
        return None
    table = cost_table(results.get("models") or {}, _runs(folder))
    lines = readme.read_text(encoding="utf-8").split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith(table[0])), None)
    end = None if start is None else next((i for i in range(start, len(lines)) if lines[i].startswith("| all |")), None)
    if end is None:
        return None
    readme.write_text("\n".join(lines[:start] + table + lines[end + 1:]), encoding="utf-8")
    return readme
