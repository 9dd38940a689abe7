"""A named setting from an argument or an environment variable, refused with its choices when unknown."""

import pytest

from bab.core.choices import check_choice, choice_from_env

COLOURS = ("red", "green")


def test_a_known_choice_passes_and_an_unknown_one_is_refused_with_the_choices_and_its_owner():
    check_choice("red", COLOURS, "colour")
    for bad in ("blue", "Red", " red", ""):
        with pytest.raises(ValueError) as info:
            check_choice(bad, COLOURS, "--colour")
        assert str(info.value) == f"--colour must be one of ('red', 'green'), got {bad!r}"


def test_the_variable_when_set_else_the_default(monkeypatch):
    monkeypatch.delenv("BAB_COLOUR", raising=False)
    assert choice_from_env("BAB_COLOUR", COLOURS, "green") == "green"
    for blank in ("", "  "):
        monkeypatch.setenv("BAB_COLOUR", blank)
        assert choice_from_env("BAB_COLOUR", COLOURS, "green") == "green"
    monkeypatch.setenv("BAB_COLOUR", " red\n")  # surrounding white space, as a shell line may leave it
    assert choice_from_env("BAB_COLOUR", COLOURS, "green") == "red"
    monkeypatch.setenv("BAB_COLOUR", "blue")
    with pytest.raises(ValueError, match=r"\$BAB_COLOUR must be one of \('red', 'green'\), got 'blue'"):
        choice_from_env("BAB_COLOUR", COLOURS, "green")
