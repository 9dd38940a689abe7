"""The claims' rules as data: the files read into claims, their digests, and the ledger that makes every change an
amendment."""

import copy

import pytest

from bab.experiments.synthetic import SYNTHETIC_METHODS as SYN
from bab.report.claims import CLAIMS, claim_by_id
from bab.report.claims.registry import (
    RegistryError,
    build_claim,
    check_ledger,
    digest,
    ledger,
    parse_row,
    registry_digest,
    row_text,
    rule_specs,
)
from bab.report.claims.verdicts import Region, Row


def test_the_committed_rules_match_their_ledger():
    check_ledger()  # raises, naming the claim, when a rule was edited without an amendment
    assert set(ledger()["claims"]) == set(rule_specs()) == {c.id for c in CLAIMS}


def test_a_rule_edited_without_an_amendment_fails_and_with_one_passes():
    specs = copy.deepcopy(rule_specs())
    book = copy.deepcopy(ledger())
    before = copy.deepcopy(specs["dcp-throughput"])
    specs["dcp-throughput"]["delta"] = 0.25
    with pytest.raises(RegistryError, match="dcp-throughput: the rule's digest"):
        check_ledger(specs, book)
    amended = {"date": "2026-12-07", "claim": "dcp-throughput", "reason": "a test", "before": before,
               "from": digest(before), "to": digest(specs["dcp-throughput"])}
    check_ledger(specs, {**book, "amendments": [*book["amendments"], amended]})
    # an amendment that does not start where the rule was refuses too
    wrong = {**amended, "from": "000000000000", "before": None}
    with pytest.raises(RegistryError, match="starts from 000000000000"):
        check_ledger(specs, {**book, "amendments": [*book["amendments"], wrong]})
    # and one without a reason
    with pytest.raises(RegistryError, match="needs a date and a reason"):
        check_ledger(specs, {**book, "amendments": [*book["amendments"], {**amended, "reason": ""}]})


def test_a_new_claim_must_be_registered():
    specs = copy.deepcopy(rule_specs())
    specs["new-claim"] = {**specs["dcp-throughput"], "id": "new-claim"}
    with pytest.raises(RegistryError, match="new-claim: not in the ledger"):
        check_ledger(specs, ledger())


def test_the_registry_digest_changes_with_any_rule():
    specs = copy.deepcopy(rule_specs())
    assert digest(specs) == registry_digest()
    specs["baa-synthetic-retention"]["region"]["low"] = -0.2
    assert digest(specs) != registry_digest()


def test_rows_are_written_as_experiment_method_budget_and_settings():
    row = parse_row("synthetic: warm-start budgeted @ 0.25")
    assert row == Row(SYN.warm, 0.25)
    assert row_text(row) == "synthetic: warm-start budgeted @ 0.25"
    settings = parse_row("bert_ag_news: compute, structural @ 0.5 {model=BERT-Mini shape}")
    assert settings.settings == (("model", "BERT-Mini shape"),)
    assert parse_row("gpt2_context_pruning: static context mask {kind=local, gamma=0.3}").settings == (
        ("kind", "local"), ("gamma", 0.3))
    assert parse_row("vit_sparsifiner: EViT + sparsifiner, fine-tuned @ 0.25 {token_keep=0.7}").budget == 0.25
    with pytest.raises(ValueError, match="declares no method 'no such method'"):
        parse_row("synthetic: no such method @ 0.5")
    with pytest.raises(RegistryError, match="a row is written"):
        parse_row("synthetic warm-start budgeted")


def test_a_retention_rule_is_the_row_minus_its_own_dense_model():
    claim = build_claim({"kind": "retention", "id": "x", "paper": "budgeted attention", "where": "here",
                         "statement": "keeps", "row": "synthetic: warm-start budgeted @ 0.5",
                         "region": {"low": -0.1, "reason": "rounding"}})
    assert claim.terms == ((Row(SYN.warm, 0.5), 1), (Row(SYN.dense, 1.0), -1))
    assert claim.region == Region(low=-0.1, reason="rounding")
    assert claim.metric == "accuracy minus own dense, points"


def test_a_rule_with_an_unknown_field_or_kind_is_refused():
    with pytest.raises(RegistryError, match="unknown fields \\['margin_of_error'\\]"):
        build_claim({"kind": "speed", "id": "x", "paper": "sparsifiner", "where": "", "statement": "",
                     "metric": "", "row": "synthetic: dense @ 1", "margin_of_error": 2})
    with pytest.raises(RegistryError, match="kind must be one of"):
        build_claim({"kind": "vibes", "id": "x"})


def test_parts_inherit_their_claims_id_and_paper():
    claim = claim_by_id("baa-hard-adaptation-recovers")
    assert [name for name, _ in claim.parts] == ["loses without adaptation", "adaptation recovers most of it"]
    assert all(part.id == claim.id and part.paper == claim.paper for _, part in claim.parts)


def test_the_claims_command_checks_the_ledger_and_refuses_an_unknown_rule(capsys):
    from bab.__main__ import main

    assert main(["claims", "check"]) == 0
    assert f"rules {registry_digest()} match their ledger" in capsys.readouterr().out
    assert main(["claims", "amend", "no-such-claim", "--reason", "a test"]) == 2
    assert "no rule no-such-claim" in capsys.readouterr().err


def test_amending_a_rule_that_did_not_change_is_refused(capsys):
    from bab.__main__ import main

    assert main(["claims", "amend", "dcp-throughput", "--reason", "nothing changed"]) == 2
    assert "the rule is as it was at HEAD; edit it first" in capsys.readouterr().err


def test_every_amendment_is_judged_before_and_after_on_rows():
    from bab.report.claims import amendments_judged

    shown = amendments_judged([])
    assert len(shown) == len(ledger()["amendments"]) > 0
    throughput = next(a for a in shown if a["claim"] == "dcp-throughput")
    assert (throughput["before"], throughput["after"]) == ("not run", "not run")  # no rows: nothing to judge
    # the old KV-memory rule has no region today's kind can read: its verdict on the record stands in the ledger
    from bab.experiments.context_pruning import GPT2_METHODS as GPT2

    headline = {"experiment": GPT2.headline.experiment, "method": GPT2.headline.name, "budget": 0.2, "cost": 0.2,
                "memory_ratio": 4.8}
    memory = next(a for a in amendments_judged([headline]) if a["claim"] == "dcp-kv-memory")
    assert memory["after"] == "reproduced"  # 4.8x of the 5x that 20% kept implies: 96%, above 90%
    assert (memory["before"], memory["before_note"]) == ("reproduced", "on the record, when amended")
