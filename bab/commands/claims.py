"""``claims``: the claims' rules and their ledger (``bab.report.claims.registry``).

    python -m bab claims check                                   the rules against their ledger, and their digest
    python -m bab claims amend CLAIM [CLAIM ...] --reason TEXT   record edited rules as amendments (since HEAD)
"""

from __future__ import annotations

from bab.commands.common import DefaultsFormatter
from bab.core.errors import BadInput


def register(sub) -> None:
    p = sub.add_parser("claims", help="check the claims' rules against their ledger, or record an amendment",
                       formatter_class=DefaultsFormatter,
                       description="A claim's rule (bab/report/claims/rules/*.yaml) changed after it was registered "
                                   "is an amendment: edit the rule, then record it here with its reason; the rule "
                                   "before it is read from git.")
    commands = p.add_subparsers(dest="claims_command", required=True)
    amending = commands.add_parser("amend", help="record edited rules in the ledger", formatter_class=DefaultsFormatter)
    amending.add_argument("claim", nargs="+", help="the ids of the edited rules")
    amending.add_argument("--reason", required=True, help="why the rule changed, from the paper's wording")
    amending.add_argument("--since", default="HEAD", help="the git revision holding the rules before")
    commands.add_parser("check", help="the rules against their ledger")
    p.set_defaults(run=_claims)


def _claims(args) -> int:
    from bab.report.claims import registry

    if args.claims_command == "amend":
        if not args.reason.strip():
            raise BadInput("--reason is empty: say why the rule changed")
        known = registry.rule_specs()
        unknown = [c for c in args.claim if c not in known]
        if unknown:
            raise BadInput(f"no rule {', '.join(unknown)} in bab/report/claims/rules/; known: {', '.join(known)}")
        before = registry.rules_at(args.since)
        unchanged = [c for c in args.claim if c in before and registry.digest(before[c]) == registry.rule_digest(c)]
        if unchanged:
            raise BadInput(f"{', '.join(unchanged)}: the rule is as it was at {args.since}; edit it first")
        for claim_id in args.claim:
            entry = registry.amend(claim_id, args.reason, before.get(claim_id))
            print(f"{claim_id}: {entry['from']} -> {entry['to']} ({entry['date']})")
        # the claims amended now; other edited rules are amended (or checked) on their own
        registry.check_ledger({c: registry.rule_specs()[c] for c in args.claim})
        print(f"{len(args.claim)} rule(s) amended; python -m bab claims check checks them all")
        return 0
    registry.check_ledger()
    print(f"rules {registry.registry_digest()} match their ledger")
    return 0
