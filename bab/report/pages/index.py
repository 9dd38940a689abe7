"""The report's front page: every notebook's status and run time, the papers' numbers beside ours, the machine.

``write_index`` merges the notebooks' result rows into ``results.json`` and renders ``index.html``
from ``template.html`` (jinja2, autoescaped).
"""

import importlib
import importlib.metadata
import os
import platform
import re
import sys
import traceback
from importlib import resources
from pathlib import Path

from bab.core.blas import cpu_fields
from bab.report.claims.counts import CLAIM_SECTIONS, claims_summary, verdict_label
from bab.report.results.contract import RESULTS_CONTRACT, now_iso, read_json, write_json_atomic
from bab.report.results.seeds import combine_seed_results, split_seed_stem

COST_AXIS_FIGURE = "cost_axis.png"


def collect_runs(staging, notebooks):
    """One record per run of a notebook (one per seed for a notebook run at several, ``bab.report.results.seeds``) and
    per earlier run record without a notebook file; 'not run' for a notebook without any."""
    recorded: dict[str, list[tuple[int, str]]] = {}  # notebook -> [(seed, saved name)], seed -1 for none
    for path in (staging / "runs").glob("*.json"):
        notebook, seed = split_seed_stem(path.stem)
        recorded.setdefault(notebook, []).append((-1 if seed is None else seed, path.stem))
    order = [nb.stem for nb in notebooks] + sorted(set(recorded) - {nb.stem for nb in notebooks})
    stems = [stem for notebook in order for _, stem in sorted(recorded.get(notebook, [(-1, notebook)]))]
    runs = []
    for stem in stems:
        record = read_json(staging / "runs" / f"{stem}.json") or {
            "notebook": stem,
            "status": "not run",
            "seconds": None,
            "error": None,
            "finished_at": None,
            "commit": None,
        }
        record["html"] = f"{stem}.html" if (staging / f"{stem}.html").exists() else None
        runs.append(record)
    return runs


def results_files(staging):
    """{stem: contents} of every readable results/<stem>.json in the staging folder (``save_results``)."""
    files = {path.stem: read_json(path) for path in sorted((staging / "results").glob("*.json"))}
    return {stem: data for stem, data in files.items() if data is not None}


def collect_seeded_results(staging, files=None):
    """({notebook stem: (results contract version or None, rows)} from the results files (read here unless
    ``files``), a notebook run at several seeds as its rows averaged over them (``bab.report.results.seeds``);
    {notebook stem: {seed: rows}} of the notebooks run at several seeds)."""
    files = results_files(staging) if files is None else files
    return combine_seed_results({stem: (data.get("contract"), data.get("rows", [])) for stem, data in files.items()})


def recorded(files, key: str, keep=lambda value: value is not None) -> dict:
    """{stem: the ``key`` of its results file} where ``keep`` accepts it (``save_results``: "models" the kernel
    trained or took from the run cache, "measurements" it computed or read, "code" {bab module path: digest} it
    loaded; notebooks written before one was recorded are left out)."""
    return {stem: data[key] for stem, data in files.items() if keep(data.get(key))}


def current_rows(results):
    """(the rows of notebooks written under the current results contract, the notebooks left out)."""
    current = {stem: rows for stem, (contract, rows) in results.items() if contract == RESULTS_CONTRACT}
    older = sorted(stem for stem in results if stem not in current)
    return [row for stem_rows in current.values() for row in stem_rows], older


def collect_outcomes(staging) -> dict:
    """The per-example outcomes of every notebook's rows ({key: array}, ``bab.core.outcomes``), from the
    results/<stem>.outcomes.npz files beside the results."""
    from bab.core import outcomes

    merged = {}
    for path in sorted((staging / "results").glob("*.outcomes.npz")):
        merged.update(outcomes.read(path))
    return merged


def judged_claims(results, seed_rows=None, profile=None, outcomes=None):
    """The claims (bab.report.claims) judged on the rows of notebooks written under the current results
    contract, as plain dicts (``bab.report.claims.Judged.as_dict``); and the notebooks left out because their rows
    are older. Rows of an older contract can mean something else under the same method name (the paper's recipe,
    since version 2). ``seed_rows``: {notebook: {seed: rows}} of notebooks run at several seeds, for intervals
    over seeds; ``profile``: the report's profile, for the test-set sizes of rows that do not carry theirs;
    ``outcomes``: the rows' per-example outcomes, for paired intervals (``collect_outcomes``)."""
    from bab.report.claims import Evidence, judge_all

    rows, older = current_rows(results)
    evidence = Evidence(seed_rows or {}, profile, outcomes or {})
    return [j.as_dict() for j in judge_all(rows, evidence=evidence)], older


def judged_rules(rows, seed_rows, profile, outcomes, repo_dir) -> dict:
    """What the front page says of the rules the claims were judged with: their digest, the ledger's amendments
    with each claim's verdict on ``rows`` under the rule before and after, and the committed record's verdicts."""
    from bab.report.claims import Evidence, amendments_judged, registry_digest

    evidence = Evidence(seed_rows or {}, profile, outcomes or {})
    return {"digest": registry_digest(), "amendments": amendments_judged(rows, evidence),
            "record": committed_record(repo_dir, profile)}


def comparison_html(rows):
    """The paper-vs-reproduction table as HTML via bab.report.results.paper.comparison_table; (html, error)."""
    try:
        paper = importlib.import_module("bab.report.results.paper")
        table = paper.comparison_table(rows)
        text = table.to_html(index=False, na_rep="–", float_format=lambda x: f"{x:.4g}", border=0, classes="data")
        return text, None
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def dist_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def cpu_name():
    return (cpu_fields() or {}).get("model name") or platform.processor() or platform.machine()


# what a run record's "environment" holds, in the order the index page shows it
ENVIRONMENT_KEYS = ("python", "torch", "transformers", "bab", "platform", "cpu")


def run_environment() -> dict:
    """Versions and machine facts of the process running a notebook, kept in its run record (``runs/<stem>.json``)."""
    return {
        "python": platform.python_version(),
        "torch": dist_version("torch"),
        "transformers": dist_version("transformers"),
        "bab": dist_version("bab"),
        "platform": platform.platform(),
        "cpu": f"{cpu_name()} ({os.cpu_count()} logical cores)",
    }


def environment_info(profile, runs) -> dict:
    """The Environment table of the index page, from the run records alone (so rebuilding the pages elsewhere
    changes nothing): each fact's distinct values over the runs, "not recorded" for a run without it, and the
    commits the runs ran at."""
    ran = [run for run in runs if run.get("status") != "not run"]
    info = {"profile": profile}
    for key in ENVIRONMENT_KEYS:
        values = {(run.get("environment") or {}).get(key) or "not recorded" for run in ran}
        info[key] = "; ".join(sorted(values)) or "–"
    info["git commit"] = ", ".join(sorted({run.get("commit") or "not recorded" for run in ran})) or "–"
    return info


def generated_time(runs) -> str:
    """When a report's newest notebook run finished (what its pages describe), or now for a report with none."""
    finished = [run["finished_at"] for run in runs if run.get("finished_at")]
    return max(finished) if finished else now_iso()


MINUS = "\u2212"  # a typographic minus: "−0.55" reads as a number, "-0.55" as a hyphen


def _decimals(magnitude: float) -> int:
    return 3 if 0 < magnitude < 0.1 else 2 if magnitude < 10 else 1 if magnitude < 100 else 0


def format_number(value, signed: bool = False, decimals: int | None = None) -> str:
    """A claim's number as the page shows it: three decimals below 0.1, two below 10, one below 100, none above
    (thousands separated), unless ``decimals`` says; a minus sign, and a plus sign too when ``signed``."""
    if value is None:
        return "–"
    text = f"{abs(value):,.{_decimals(abs(value)) if decimals is None else decimals}f}"
    if value < 0 and text.strip("0.,"):
        return MINUS + text
    return ("+" if signed and text.strip("0.,") else "") + text


def ours_with_interval(claim) -> str:
    """"ours [low, high]" of a judged claim ("−0.55 [−1.10, +0.02]"), the three with the decimals of the largest:
    signed throughout when any of them is negative (a difference), plain otherwise (a ratio); "–" when not
    measured."""
    ours, low, high = claim.get("ours"), claim.get("low"), claim.get("high")
    if ours is None:
        return "–"
    if low is None or high is None:
        return format_number(ours)
    if low == high:  # exact (counted) or a point estimate: the interval line says which, and why
        return f"{format_number(ours)} (no interval)"
    decimals = _decimals(max(abs(ours), abs(low), abs(high)))
    signed = min(ours, low, high) < 0
    return (f"{format_number(ours, signed, decimals)} "
            f"[{format_number(low, signed, decimals)}, {format_number(high, signed, decimals)}]")


def region_text(region: str) -> str:
    """A claim's region with the page's signs: "≥", "≤" and a minus before a number."""
    text = (region or "").replace(">=", "\u2265").replace("<=", "\u2264")
    return re.sub(r"(?<![\w.)\]])-(?=\d|\.\d)", MINUS, text)


def claim_row(claim, record=None) -> dict:
    """A judged claim with the texts its table row shows; ``record``: {claim id: the committed record's judged
    claim}, shown beside an indicative verdict."""
    beside = (record or {}).get(claim["id"]) if claim.get("indicative") else None
    return {**claim, "ours_text": ours_with_interval(claim), "theirs_text": format_number(claim.get("theirs")),
            "setting_text": claim.get("setting") or claim.get("setup") or "",
            "region": region_text(claim.get("region")), "label": verdict_label(claim),
            "css": "v-" + claim["verdict"].replace(" ", "-") + (" indicative" if claim.get("indicative") else ""),
            "record": None if beside is None else {**beside, "label": verdict_label(beside)}}


def claim_sections(claims, record=None) -> list[dict]:
    """The claims tested with the papers' recipes, then those of this package's recipe: [{"title", "claims"}]."""
    return [{"title": title, "claims": [claim_row(c, record) for c in claims if c.get("recipe", "paper") == recipe]}
            for recipe, title in CLAIM_SECTIONS]


def committed_record(repo_dir, profile) -> dict:
    """The committed record's judged claims by id, with where it stands ({"folder", "generated_at"}), to show
    beside a smaller report's indicative verdicts; empty for the record itself or when there is none."""
    folder = Path(repo_dir) / "reports" / "paper"
    data = read_json(folder / "results.json") if profile != "paper" else None
    if not data:
        return {}
    commits = sorted({(read_json(path) or {}).get("commit") or "?" for path in (folder / "runs").glob("*.json")})
    where = {"folder": "reports/paper", "generated_at": data.get("generated_at", ""),
             "commits": ", ".join(commits[:3]) + (f" and {len(commits) - 3} more" if len(commits) > 3 else "")}
    return {c["id"]: {**c, **where} for c in data.get("claims") or []}


def mark_stale(runs, results, notebooks_dir) -> list[dict]:
    """``runs`` with ``stale``: whether the notebook's code or the ``bab`` modules its kernel loaded changed since
    it ran (``bab.report.results.record``'s rule, so the front page and RECORD.md agree)."""
    from bab.core.provenance import changed_code
    from bab.report.results.record import current_code

    code_now = current_code(notebooks_dir)
    package = results.get("code") or {}
    marked = []
    for run in runs:
        notebook = split_seed_stem(run.get("notebook") or "")[0]
        notebook_changed = bool(run.get("code")) and notebook in code_now and code_now[notebook] != run["code"]
        loaded = package.get(run.get("notebook"))
        marked.append({**run, "stale": notebook_changed or bool(loaded and changed_code(loaded))})
    return marked


def wall_time(seconds) -> str:
    """"12.3 s", "4 min 05 s", "2 h 26 min"; "" when not recorded."""
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"


def error_line(error, limit: int = 240) -> str:
    """A failed notebook's error on one line (its type and the first line of its message, cut at ``limit``); the
    page keeps the traceback folded away."""
    message = str(error.get("evalue") or "").strip().splitlines()
    text = f"{error.get('ename') or 'error'}: {message[0] if message else ''}".rstrip(": ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_index(profile, generated_at, runs, table_html, table_error, env, claims=(), older=(), claims_error=None,
                 figure=None, rules=None, lanes=None):
    """The index page as a string (jinja2, autoescaped): the claim counts per paper (the papers' recipes apart
    from this package's), the claims in two tables, a glossary, the cost-axis figure, the notebooks, the long
    paper-vs-reproduction table (collapsed), then the machine. ``rules``: {"digest": the rules' digest the claims
    were judged with, "amendments": ``amendments_judged``, "record": ``committed_record``}. ``lanes``: a record's
    lanes (``bab.report.lanes.plan.LaneState.as_dict``), shown in place of the notebooks' table."""
    import jinja2

    source = resources.files("bab.report.pages").joinpath("template.html").read_text(encoding="utf-8")
    template = jinja2.Environment(autoescape=True).from_string(source)
    count = lambda status: sum(r["status"] == status for r in runs)  # noqa: E731
    claims = list(claims)
    shown_runs = [{**r, "wall_time": wall_time(r.get("seconds")),
                   "error_line": error_line(r["error"]) if r.get("error") else ""} for r in runs]
    return template.render(
        profile=profile,
        generated_at=generated_at,
        runs=shown_runs,
        table_html=table_html,
        table_error=table_error,
        env=env,
        sections=claim_sections(claims, (rules or {}).get("record")),
        rules=rules or {},
        n_stale=sum(bool(r.get("stale")) for r in runs),
        summary=claims_summary(claims) if claims else {},
        older=list(older),
        claims_error=claims_error,
        figure=figure,
        n_ok=count("ok"),
        n_failed=count("failed"),
        n_not_run=count("not run"),
        lanes=[{**lane, "wall_time": wall_time(lane.get("seconds")), "core_time": wall_time(lane.get("cpu_seconds")),
                "cached_time": wall_time(lane.get("cached_seconds") or None)} for lane in lanes or []],
        n_landed=sum(lane["state"] == "landed" for lane in lanes or []),
    )


def write_index(staging, profile, notebooks, repo_dir, lanes=None, claim_view=None):
    """Write index.html and results.json into staging, and the notebook pages that are missing or were written
    by an older converter (``bab.report.pages.notebook_pages.write_pages``: MathJax beside them, no machine path);
    return the comparison-table error (or None). A record built lane by lane passes its ``lanes``
    (``LaneState.as_dict``: they decide which runs are stale) and ``claim_view``, which gives each judged claim (a
    dict) as that record shows it (``bab.report.lanes.landing.record_claim``)."""
    from bab.report.pages.notebook_pages import write_pages

    write_pages(staging, repo_dir, profile)
    runs = collect_runs(staging, notebooks)
    generated_at = generated_time(runs)
    files = results_files(staging)
    with_contract, seed_rows = collect_seeded_results(staging, files)
    results = {stem: rows for stem, (_, rows) in with_contract.items()}
    rows = [row for stem_rows in results.values() for row in stem_rows]
    table_html, table_error = comparison_html(rows)
    claims, older, claims_error, figure, rules = [], [], None, None, {}
    try:
        outcomes = collect_outcomes(staging)
        claims, older = judged_claims(with_contract, seed_rows, profile, outcomes)
        if claim_view is not None:
            claims = [claim_view(claim) for claim in claims]
        rows_judged, _ = current_rows(with_contract)
        rules = judged_rules(rows_judged, seed_rows, profile, outcomes, repo_dir)
        if rows_judged:
            from bab.report.pages.figures import cost_axis_figure

            cost_axis_figure(rows_judged, staging / COST_AXIS_FIGURE)
            figure = COST_AXIS_FIGURE
    except Exception as exc:  # the page still shows the notebooks and the rows; whoever built it sees why
        claims_error = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
        print(f"{staging / 'index.html'}: claims unavailable ({claims_error}); the traceback is above",
              file=sys.stderr)
    merged = {
        "profile": profile,
        "generated_at": generated_at,
        "notebooks": {r["notebook"]: r["status"] for r in runs},
        "contracts": {stem: contract for stem, (contract, _) in with_contract.items()},
        "claims": claims,
        "rules_digest": rules.get("digest"),
        "rows": [{"notebook": stem, **row} for stem, stem_rows in results.items() for row in stem_rows],
        # the rows of each seed's run of a notebook run at several seeds, before ``rows`` averaged them
        "seed_rows": {stem: {str(seed): rows for seed, rows in by_seed.items()} for stem, by_seed in seed_rows.items()},
        "models": recorded(files, "models"),
        "measurements": recorded(files, "measurements", bool),  # notebooks that measured nothing left out too
        "code": recorded(files, "code"),
    }
    if lanes is not None:
        merged["lanes"] = lanes
    write_json_atomic(staging / "results.json", merged)
    if lanes is None:
        runs = mark_stale(runs, merged, Path(repo_dir) / "notebooks")
    else:  # a lane is stale when the fingerprints that decide its numbers changed, not any code it loaded
        stale = {lane["stem"] for lane in lanes if lane["state"] == "stale"}
        runs = [{**run, "stale": run.get("notebook") in stale} for run in runs]
    page = render_index(profile, generated_at, runs, table_html, table_error, environment_info(profile, runs),
                        claims, older, claims_error, figure, rules, lanes)
    from bab.report.pages.notebook_pages import scrub_paths

    (staging / "index.html").write_text(scrub_paths(page, repo_dir), encoding="utf-8")
    return table_error
