"""`python -m bab cache`: what the run cache holds, with sizes, and removing by age, by name or the unfinished runs'
leftovers; never what a running training holds. And the files bab writes are readable as any file is."""

import os
import stat
import time

import pytest
import torch

from bab.__main__ import main
from bab.core import cache_folder
from bab.core.runs import RunCache


def fake_cache(root):
    """Two finished runs (one 40 days old), a measurement, a converted model, an unfinished run's checkpoint and its
    free lock."""
    cache = RunCache(root)
    cache.save("dense", {"lr": 1}, torch.nn.Linear(4, 4), {"accuracy": 1.0})
    old = cache.save("warm", {"lr": 2}, torch.nn.Linear(8, 8), {"accuracy": 2.0})
    cache.measured("ppl", {"x": 1}, lambda: {"v": 1.0})
    partial = root / "partial" / "hard-abc"
    partial.mkdir(parents=True)
    (partial / "checkpoint.pt").write_bytes(b"x" * 1000)
    (root / "partial" / "hard-abc.lock").touch()
    converted = root / "converted" / "smollm2-0123456789abcdef"
    converted.mkdir(parents=True)
    (converted / "model.safetensors").write_bytes(b"x" * 300)
    (root / "converted" / ".smollm2-staging").mkdir()  # a copy being written: not listed
    forty_days = time.time() - 40 * 86400
    for path in [old, *old.iterdir()]:
        os.utime(path, (forty_days, forty_days))
    return cache


def test_entries_list_every_kind_with_its_size(tmp_path):
    fake_cache(tmp_path)
    found = {(e["name"].split("-")[0], e["kind"]): e for e in cache_folder.entries(tmp_path)}
    assert sorted(found) == [("dense", "run"), ("hard", "lock"), ("hard", "partial"), ("ppl", "measurement"),
                             ("smollm2", "converted"), ("warm", "run")]
    assert found["smollm2", "converted"]["bytes"] == 300
    warm = found["warm", "run"]
    assert warm["bytes"] == sum(p.stat().st_size for p in warm["path"].iterdir()) and warm["age_days"] > 39
    assert found["hard", "partial"]["bytes"] == 1000 and found["dense", "run"]["age_days"] < 1
    assert found["hard", "lock"]["held"] is False


def test_select_by_age_by_prefix_and_the_leftovers(tmp_path):
    fake_cache(tmp_path)
    found = cache_folder.entries(tmp_path)

    def names(**how):
        return sorted(e["name"].split("-")[0] + ":" + e["kind"] for e in cache_folder.select(found, **how))

    assert names(older_than_days=30) == ["warm:run"]
    assert names(prefix="dense") == ["dense:run"]
    assert names(prefix="smollm2") == ["smollm2:converted"]
    assert names(older_than_days=30, prefix="dense") == []  # both must hold
    assert names(partial=True) == ["hard:lock", "hard:partial"]
    with pytest.raises(ValueError, match="say what to remove"):
        cache_folder.select(found)
    with pytest.raises(ValueError, match=">= 0"):
        cache_folder.select(found, older_than_days=-1)


def test_a_held_lock_and_its_checkpoint_are_never_selected(tmp_path):
    fcntl = pytest.importorskip("fcntl")
    fake_cache(tmp_path)
    with open(tmp_path / "partial" / "hard-abc.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # as a training in progress holds it
        found = cache_folder.entries(tmp_path)
        assert next(e for e in found if e["kind"] == "lock")["held"] is True
        assert cache_folder.select(found, partial=True) == []


def test_the_command_lists_then_removes(tmp_path, capsys):
    fake_cache(tmp_path)
    assert main(["cache", "--root", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in ("dense-", "warm-", "smollm2-", f"{tmp_path}: 6 entries in all"))
    assert main(["cache", "--root", str(tmp_path), "--older-than", "30"]) == 0
    assert "1 entries selected" in capsys.readouterr().out and any(tmp_path.glob("warm-*"))  # listed, not removed
    assert main(["cache", "--root", str(tmp_path), "--older-than", "30", "--partial", "--remove"]) == 0
    assert "removed 3 entries" in capsys.readouterr().out
    assert not any(tmp_path.glob("warm-*")) and not (tmp_path / "partial" / "hard-abc").exists()
    assert any(tmp_path.glob("dense-*"))
    assert main(["cache", "--root", str(tmp_path), "--remove"]) == 2
    assert "--remove needs --older-than" in capsys.readouterr().err


def test_a_stored_run_is_readable_as_any_file_is(tmp_path):
    """safetensors writes 0600 and mkdtemp makes 0700; a stored run gets the umask's usual modes instead."""
    mask = os.umask(0o022)
    try:
        folder = RunCache(tmp_path).save("dense", {"lr": 1}, torch.nn.Linear(2, 2), {"accuracy": 1.0})
    finally:
        os.umask(mask)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert {stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()} == {0o644}
