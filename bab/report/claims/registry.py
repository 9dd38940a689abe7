"""The claims' rules as data: one YAML file per paper under ``rules/``, read into ``Claim`` objects, with digests.

A rule is everything that decides a verdict: the paper's sentence and where it stands, the kind of claim, the rows
it reads, the region our number must lie in with its margin and the reason for it, the reference row, the parts
and the recipe it counts under. The files are registered before a record is judged with them; ``ledger.yaml``
holds, per claim, the digest it was registered with and every later change as a dated *amendment* (the reason,
the rule before it, the digests before and after). ``check_ledger`` fails when a rule's digest is not the one the
ledger ends at, so a rule cannot change silently; a report stores ``registry_digest()`` and shows the amendments.

A rule file is a list of claims, each a mapping with a ``kind`` (``KINDS``) and the fields of that kind. Rows are
written ``"experiment: method name @ budget {key=value, ...}"`` (budget and settings optional), methods
``"experiment: method name"``, regions ``{low, high, strict, reason}``, a claim's parts as a list of mappings
with a ``name``. ``retention`` (a row's accuracy minus its own dense model's) and ``margin`` (one row's accuracy
minus another's) are the two common accuracy claims; ``accuracy`` takes explicit ``terms`` ([coefficient, row]).
A value ``{paper: NAME}`` reads ``NAME`` from the papers' numbers (``bab.report.results.paper``).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import re
from functools import cache
from importlib import resources

from bab.experiments.methods import method_of
from bab.report.claims import kinds
from bab.report.claims.verdicts import PAPERS, Region, Row, dense_of
from bab.report.results import paper as paper_numbers

RULE_FILES = {paper: f"{paper.replace(' ', '-')}.yaml" for paper in PAPERS}
LEDGER = "ledger.yaml"

KINDS = {
    "accuracy": kinds.Accuracy, "retention": kinds.Accuracy, "margin": kinds.Accuracy, "parts": kinds.Parts,
    "cost_tracks": kinds.CostTracks, "seed_collapse": kinds.SeedCollapse, "speed": kinds.Speed,
    "memory_follows_pruning": kinds.MemoryFollowsPruning, "perplexity_held": kinds.PerplexityHeld,
    "statistic": kinds.Statistic, "kinds_first": kinds.KindsFirst, "zero_shot_held": kinds.ZeroShotHeld,
    "not_yet": kinds.NotYet, "dominates": kinds.Dominates, "counted": kinds.Counted,
    "monotone": kinds.Monotone, "beats_static": kinds.BeatsStatic,
    "beats_over_seeds": kinds.BeatsOverSeeds, "follows_setting": kinds.FollowsSetting,
}

_ROW = re.compile(r"^(?P<experiment>[\w-]+): (?P<name>.+?)(?: @ (?P<budget>[\d.]+))?(?: \{(?P<settings>.*)\})?$")


class RegistryError(ValueError):
    """A rule file or the ledger that cannot be read as written."""


# ----------------------------------------------------------------------------- reading rules


def _setting_value(text: str):
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text) if re.fullmatch(r"-?\d+", text) else float(text)
    except ValueError:
        return text


def parse_row(text: str) -> Row:
    """``"experiment: method name @ budget {key=value, ...}"`` as a ``Row`` of the declared method."""
    match = _ROW.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise RegistryError(f"a row is written 'experiment: method name @ budget {{key=value}}', got {text!r}")
    settings = ()
    if match["settings"]:
        pairs = [item.split("=", 1) for item in match["settings"].split(", ")]
        settings = tuple((key.strip(), _setting_value(value)) for key, value in pairs)
    budget = None if match["budget"] is None else float(match["budget"])
    return Row(method_of(match["experiment"], match["name"]), budget, settings)


def row_text(row: Row) -> str:
    """The inverse of ``parse_row``."""
    text = f"{row.method.experiment}: {row.method.name}"
    if row.budget is not None:
        text += f" @ {row.budget:g}"
    if row.settings:
        text += " {" + ", ".join(f"{key}={str(value).lower() if isinstance(value, bool) else value}"
                                 for key, value in row.settings) + "}"
    return text


def _method(text: str):
    experiment, _, name = str(text).partition(": ")
    return method_of(experiment, name)


def _region(spec) -> Region:
    if not isinstance(spec, dict) or not set(spec) <= {"low", "high", "strict", "reason"}:
        raise RegistryError(f"a region is a mapping of low, high, strict and reason, got {spec!r}")
    return Region(**spec)


def _decode(field_type: str, name: str, value, context: dict):
    """A rule's field as its ``Claim`` dataclass holds it, by the field's declared type."""
    if isinstance(value, dict) and set(value) == {"paper"}:
        found = getattr(paper_numbers, value["paper"])
        return tuple(found) if isinstance(found, list | tuple) else found
    if value is None:
        return None
    if "Region" in field_type:
        return _region(value)
    if "Method" in field_type:
        return _method(value)
    if "Row" in field_type:
        return tuple(parse_row(v) for v in value) if field_type.startswith("tuple") else parse_row(value)
    if name in ("terms", "theirs_terms"):
        return tuple((parse_row(row), float(coefficient)) for coefficient, row in value)
    if name in ("parts", "beside"):
        return tuple((part["name"], build_claim({k: v for k, v in part.items() if k != "name"}, context))
                     for part in value)
    if isinstance(value, list):
        return tuple(value)
    return value


def build_claim(spec: dict, context: dict | None = None) -> kinds.Claim:
    """One rule (a mapping with a ``kind``) as its ``Claim``; a part inherits its claim's id and paper."""
    context = context or {}
    spec = dict(spec)
    kind = spec.pop("kind", None)
    if kind not in KINDS:
        raise RegistryError(f"claim {spec.get('id', context.get('id'))!r}: kind must be one of {sorted(KINDS)}, "
                            f"got {kind!r}")
    cls = KINDS[kind]
    spec.setdefault("id", context.get("id"))
    spec.setdefault("paper", context.get("paper"))
    for key in ("where", "statement"):
        spec.setdefault(key, "")
    inner = {"id": spec["id"], "paper": spec["paper"]}
    types = {f.name: f.type for f in dataclasses.fields(cls)}
    if kind == "retention":
        row = parse_row(spec.pop("row"))
        reference = parse_row(spec.pop("reference")) if "reference" in spec else dense_of(row.method)
        theirs_row = spec.pop("theirs_row", None)
        spec["terms"] = ((row, 1), (reference, -1))
        if theirs_row is not None:
            spec["theirs_terms"] = ((parse_row(theirs_row), 1), (reference, -1))
        spec.setdefault("metric", "accuracy minus own dense, points")
    elif kind == "margin":
        spec["terms"] = ((parse_row(spec.pop("better")), 1), (parse_row(spec.pop("worse")), -1))
        spec.setdefault("metric", "accuracy margin, points")
        spec.setdefault("region", {"low": 0.0, "strict": True,
                                   "reason": "the paper's claim is only the sign: a margin above 0"})
    unknown = set(spec) - set(types)
    if unknown:
        raise RegistryError(f"claim {spec['id']!r} ({kind}): unknown fields {sorted(unknown)}; "
                            f"known: {sorted(types)}")
    fields = {}
    for name, value in spec.items():
        fields[name] = value if isinstance(value, tuple) and name in ("terms", "theirs_terms") else _decode(
            types[name], name, value, inner)
    return cls(**fields)


def _read(name: str):
    import yaml

    text = resources.files("bab.report.claims").joinpath("rules", name).read_text(encoding="utf-8")
    return yaml.safe_load(text)


@cache
def rule_specs() -> dict[str, dict]:
    """{claim id: its rule as written}, in the files' order (the papers', then each file's)."""
    specs = {}
    for paper, name in RULE_FILES.items():
        data = _read(name)
        if not isinstance(data, dict) or data.get("paper") != paper or not isinstance(data.get("claims"), list):
            raise RegistryError(f"rules/{name} must be a mapping with paper: {paper!r} and a list of claims")
        for spec in data["claims"]:
            if spec.get("id") in specs:
                raise RegistryError(f"claim {spec.get('id')!r} is registered twice")
            specs[spec["id"]] = {**spec, "paper": paper}
    return specs


def load_claims(specs: dict[str, dict] | None = None) -> tuple[kinds.Claim, ...]:
    """Every registered rule as its ``Claim``."""
    return tuple(build_claim(spec) for spec in (specs or rule_specs()).values())


# ----------------------------------------------------------------------------- digests and the ledger


def digest(data) -> str:
    """The first 12 hex digits of the SHA-256 of ``data`` as canonical JSON (sorted keys)."""
    text = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def rule_digest(claim_id: str) -> str:
    """The digest of one claim's rule as written ("" for a claim not in the files)."""
    spec = rule_specs().get(claim_id)
    return "" if spec is None else digest(spec)


def registry_digest() -> str:
    """The digest of every rule together: what a report was judged with."""
    return digest(rule_specs())


@cache
def ledger() -> dict:
    """The ledger as written: {"claims": {id: {"registered": date, "digest": ...}}, "amendments": [...]}."""
    data = _read(LEDGER)
    if not isinstance(data, dict) or not isinstance(data.get("claims"), dict):
        raise RegistryError(f"rules/{LEDGER} must be a mapping with claims: {{id: {{registered, digest}}}}")
    data.setdefault("amendments", [])
    return data


def amendments() -> list[dict]:
    """The ledger's amendments, oldest first: {date, claim, reason, before (the old rule, or None for a claim
    registered by the amendment), from, to}."""
    return list(ledger()["amendments"])


def check_ledger(specs: dict[str, dict] | None = None, book: dict | None = None) -> None:
    """RegistryError unless every rule's digest is the one its ledger entry ends at: registered, then each
    amendment in order (its ``from`` the digest before, its ``to`` the digest after, its ``before`` the rule with
    the ``from`` digest), and every amendment dated and given a reason."""
    specs = rule_specs() if specs is None else specs
    book = ledger() if book is None else book
    problems = []
    for claim_id, spec in specs.items():
        entry = book["claims"].get(claim_id)
        if entry is None:
            problems.append(f"{claim_id}: not in the ledger (register it with its date and digest)")
            continue
        current = entry["digest"]
        for amendment in (a for a in book["amendments"] if a.get("claim") == claim_id):
            where = f"{claim_id}: amendment of {amendment.get('date')}"
            if not amendment.get("reason") or not isinstance(amendment.get("date"), datetime.date | str):
                problems.append(f"{where} needs a date and a reason")
            if amendment.get("from") != current:
                problems.append(f"{where} starts from {amendment.get('from')}, the rule before it was {current}")
            if amendment.get("before") is not None and digest(amendment["before"]) != amendment.get("from"):
                problems.append(f"{where}: its 'before' rule does not have the digest {amendment.get('from')}")
            current = amendment.get("to")
        if current != digest(spec):
            problems.append(f"{claim_id}: the rule's digest is {digest(spec)} but the ledger ends at {current}: a "
                            f"changed rule needs an amendment (date, reason, the rule before it)")
    if problems:
        raise RegistryError("the rules and their ledger disagree:\n  " + "\n  ".join(problems))


# ----------------------------------------------------------------------------- amending a rule


def _dump(data, path) -> None:
    import yaml

    class Indented(yaml.SafeDumper):
        def increase_indent(self, flow=False, indentless=False):
            return super().increase_indent(flow, False)

    header = "".join(line for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
                     if line.startswith("#"))
    text = yaml.dump(data, Dumper=Indented, sort_keys=False, allow_unicode=True, width=115)
    path.write_text(header + text, encoding="utf-8")


def amend(claim_id: str, reason: str, before: dict | None, on_record: dict | None = None,
          date: str | None = None) -> dict:
    """Append an amendment of ``claim_id`` to the ledger (in this checkout's ``rules/``): the rule as written now
    after ``before`` (the rule it replaces, None for a newly registered claim), with ``reason`` and today's date.
    ``on_record``: the claim's verdict on the record before and after, where it was judged. Returns the entry."""
    from pathlib import Path

    if not reason.strip():
        raise RegistryError("an amendment needs a reason")
    rule_specs.cache_clear()
    ledger.cache_clear()
    spec = rule_specs().get(claim_id)
    if spec is None:
        raise RegistryError(f"no rule {claim_id!r} in rules/")
    book = ledger()
    if before is not None and digest(before) == digest(spec):
        raise RegistryError(f"{claim_id}: the rule is as it was ({digest(spec)}); edit it first")
    entry = {"date": date or datetime.date.today().isoformat(), "claim": claim_id, "reason": reason.strip(),
             "from": None if before is None else digest(before), "to": digest(spec), "before": before}
    if on_record:
        entry["on_record"] = on_record
    if before is None:
        book["claims"][claim_id] = {"registered": entry["date"], "digest": entry["to"]}
    else:
        book["amendments"].append(entry)
    _dump(book, Path(str(resources.files("bab.report.claims").joinpath("rules", LEDGER))))
    ledger.cache_clear()
    return entry


def rules_at(revision: str) -> dict[str, dict]:
    """{claim id: rule} as the rule files stood at git ``revision`` of this checkout."""
    import subprocess

    import yaml

    specs = {}
    for paper, name in RULE_FILES.items():
        text = subprocess.run(["git", "show", f"{revision}:bab/report/claims/rules/{name}"], check=True,
                              capture_output=True, text=True).stdout
        for spec in yaml.safe_load(text)["claims"]:
            specs[spec["id"]] = {**spec, "paper": paper}
    return specs
