"""The one place that sets torch's thread count: explicit argument, then $BAB_THREADS, then every core."""

import pytest
import torch

from bab.core.threads import THREADS_ENV, apply_threads, available_cores, check_threads, default_threads, set_threads


@pytest.fixture
def restore_threads():
    saved = torch.get_num_threads()
    yield
    torch.set_num_threads(saved)


def test_explicit_count_wins_over_the_environment(monkeypatch, restore_threads):
    monkeypatch.setenv(THREADS_ENV, "2")
    assert set_threads(1) == 1 and torch.get_num_threads() == 1


def test_environment_sets_the_default(monkeypatch, restore_threads):
    monkeypatch.setenv(THREADS_ENV, " 1 ")
    assert default_threads() == 1
    assert set_threads() == 1 and torch.get_num_threads() == 1


def test_without_either_every_available_core(monkeypatch):
    monkeypatch.delenv(THREADS_ENV, raising=False)
    assert default_threads() == available_cores() >= 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "two", "", "1.0"])
def test_bad_counts_say_what_was_wrong(bad):
    with pytest.raises(ValueError, match="positive whole number of threads"):
        check_threads(bad)


def test_bad_environment_names_the_variable(monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "many")
    with pytest.raises(ValueError, match=r"\$BAB_THREADS must be a positive whole number"):
        default_threads()


def test_the_api_leaves_a_callers_setting_alone_unless_asked(monkeypatch, restore_threads):
    monkeypatch.delenv(THREADS_ENV, raising=False)
    torch.set_num_threads(1)
    assert apply_threads() == 1  # nothing asked: the caller's own setting stays
    monkeypatch.setenv(THREADS_ENV, "2")
    assert apply_threads() == 2 and apply_threads(1) == 1 and torch.get_num_threads() == 1
