"""The command line's two kinds of error: bad input is refused before any work, in one line with exit code 2; an
error once the work began is a failure, shown with its traceback, exit code 1."""

import api_fixtures
import pytest

from bab.__main__ import main
from bab.api.heads import BudgetedClassifier
from bab.core.errors import BadInput, checking

tiny_encoder = api_fixtures.tiny_encoder
topic_csvs = api_fixtures.topic_csvs
one_thread = api_fixtures.one_thread

FAST = ["--max-len", "16", "--batch-size", "8", "--epochs", "1,1,1", "--timing-examples", "8", "--timing-repeats",
        "1", "--quiet"]


def test_checking_turns_the_library_errors_of_a_check_into_bad_input_and_nothing_else():
    with pytest.raises(BadInput, match="no such file") as raised, checking():
        raise FileNotFoundError("no such file")
    assert isinstance(raised.value.__cause__, FileNotFoundError)
    with pytest.raises(ZeroDivisionError), checking():  # not a kind a check raises for bad input: left as it is
        raise ZeroDivisionError
    assert issubclass(BadInput, ValueError)  # callers of the library that catch ValueError keep catching it


@pytest.mark.parametrize("argv, message", [
    (["bench", "heads", "--budgets", "0.5,1.5"], "budget must lie in (0, 1]"),
    (["bench", "precision", "--only", "04"], "--only takes notebooks among"),
    (["cache", "--remove"], "--remove needs --older-than"),
    (["report", "--profile", "fast"], "unknown profile 'fast'"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_a_bad_file_is_refused_before_the_model_is_built(tiny_encoder, topic_csvs, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(BudgetedClassifier, "fit", lambda *a, **k: pytest.fail("trained on bad input"))
    code = main(["fit", "heads", "--train", str(tmp_path / "missing.csv"), "--test", str(topic_csvs[1]), "--model",
                 str(tiny_encoder), "--out", str(tmp_path / "out"), *FAST])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("python -m bab fit heads: error: ") and "Traceback" not in err


def test_an_error_once_training_began_is_a_failure_with_its_traceback(tiny_encoder, topic_csvs, tmp_path, monkeypatch,
                                                                      capsys):
    # a ValueError from deep inside the work (the kind a torch shape error is), after an unfinished training wrote
    # its resumable checkpoint into the run cache
    monkeypatch.setenv("BAB_CACHE_DIR", str(tmp_path / "cache"))
    checkpoint = tmp_path / "cache" / "partial" / "dense-0123" / "checkpoint.pt"

    def fails_mid_training(self, *args, **kwargs):
        checkpoint.parent.mkdir(parents=True)
        checkpoint.write_bytes(b"state")
        raise ValueError("mat1 and mat2 shapes cannot be multiplied (8x32 and 16x4)")

    monkeypatch.setattr(BudgetedClassifier, "fit", fails_mid_training)
    code = main(["fit", "heads", "--train", str(topic_csvs[0]), "--test", str(topic_csvs[1]), "--model",
                 str(tiny_encoder), "--out", str(tmp_path / "out"), *FAST])
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback (most recent call last)" in err and "in fails_mid_training" in err
    assert "ValueError: mat1 and mat2 shapes cannot be multiplied" in err
    assert "error: mat1" not in err  # never reported as bad input
    assert f"resumable checkpoint: {checkpoint}" in err
    assert not (tmp_path / "out").exists()


def test_a_bench_that_fails_while_timing_exits_1_and_its_bad_grid_exits_2(monkeypatch, capsys):
    import bab.heads.bench as heads_bench

    def fails(*args, **kwargs):
        raise TypeError("unsupported operand type(s) for +: 'Tensor' and 'NoneType'")

    monkeypatch.setattr(heads_bench, "bench_custom", fails)
    assert main(["bench", "heads", "--budgets", "0.5", "--batch-sizes", "1"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "TypeError: unsupported operand" in err and "resumable" not in err
    assert main(["bench", "heads", "--batch-sizes", "1,0"]) == 2  # the same command's bad input: before the bench
    assert "Traceback" not in capsys.readouterr().err
