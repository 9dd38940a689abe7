"""bab.core.sources: the one resolver of data and model sources, against hand-made folders."""

import pytest

from bab.core.sources import (
    ENV_VAR,
    Place,
    SourceNotFoundError,
    find_source,
    hub_offline,
    hub_place,
    package_place,
    standard_places,
)


def has_data(folder):
    return (folder / "data.txt").is_file()


def make(folder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data.txt").write_text("x")
    return folder


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """An installed package ``fakedata`` shipping ``fakedata/files/data.txt``; importing it would fail."""
    root = tmp_path / "site"
    make(root / "fakedata" / "files")
    (root / "fakedata" / "__init__.py").write_text("raise RuntimeError('the resolver must not import me')\n")
    monkeypatch.syspath_prepend(str(root))
    return root / "fakedata" / "files"


@pytest.fixture(autouse=True)
def online(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv(ENV_VAR, raising=False)


def places(path=None, **kwargs):
    return standard_places(path, "things", package=package_place("fake-data", "fakedata", "files"),
                           system=[Place("system folder", kwargs.pop("system"))], hub=hub_place("org/things"),
                           **kwargs)


def test_order_of_precedence(tmp_path, monkeypatch, fake_package):
    system = make(tmp_path / "system")
    env = tmp_path / "env"
    explicit = make(tmp_path / "mine")
    make(env / "things")
    monkeypatch.setenv(ENV_VAR, str(env))

    assert find_source(places(explicit, system=system), has_data, "data.txt").folder == explicit
    make(tmp_path / "parent" / "things")  # an explicit parent folder works through its subfolder
    assert find_source(places(tmp_path / "parent", system=system), has_data, "data.txt").folder == \
        tmp_path / "parent" / "things"

    found = find_source(places(system=system), has_data, "data.txt")
    assert found.folder == env / "things" and found.tried == ()
    (env / "things" / "data.txt").unlink()
    found = find_source(places(system=system), has_data, "data.txt")
    assert found.folder == fake_package.resolve() and found.place.label == "PyPI package fake-data"
    assert found.tried == (f"{ENV_VAR}={str(env)!r}: {env / 'things'} lacks data.txt",)
    (fake_package / "data.txt").unlink()
    assert find_source(places(system=system), has_data, "data.txt").folder == system
    (system / "data.txt").unlink()
    found = find_source(places(system=system), has_data, "data.txt")
    assert found.folder is None and found.hub_id == "org/things" and len(found.tried) == 3


def test_an_explicit_path_is_the_only_place_looked_at(tmp_path, monkeypatch):
    make(tmp_path / "env" / "things")
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "env"))
    found = find_source(places(tmp_path / "typo", system=tmp_path), has_data, "data.txt")
    assert found.place is None
    assert found.tried == (f"path: {tmp_path / 'typo'} does not exist",
                           f"path: {tmp_path / 'typo' / 'things'} does not exist")
    with pytest.raises(SourceNotFoundError, match="typo.*To fix: pass the folder"):
        found.require(f"path={str(tmp_path / 'typo')!r} holds no data.txt", "pass the folder")


def test_the_error_lists_everything_tried_and_how_to_fix(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    (tmp_path / "things").mkdir()  # exists, but lacks the file
    found = find_source(places(system=tmp_path / "nowhere"), has_data, lambda folder: f"data.txt in {folder.name}")
    found = found.failed("ConnectionError: no network")
    error = found.error("could not find the things", "set BAB_DATA_DIR, pass path=, or pip install fake-data")
    assert isinstance(error, FileNotFoundError) and isinstance(error, OSError)
    assert str(error) == (
        f"could not find the things. Tried: {ENV_VAR}={str(tmp_path)!r}: {tmp_path / 'things'} lacks data.txt in "
        f"things; PyPI package fake-data: not installed; system folder: {tmp_path / 'nowhere'} does not exist; "
        "Hugging Face hub 'org/things': ConnectionError: no network. To fix: set BAB_DATA_DIR, pass path=, or pip "
        "install fake-data.")
    assert len(error.tried) == 4


def test_unset_variable_and_switched_off_hub_are_listed_not_silently_skipped(monkeypatch, tmp_path):
    found = find_source([*standard_places(None, "things", hub=hub_place("org/x", allow_hub=False))], has_data, "x")
    assert found.place is None
    assert found.tried == (f"{ENV_VAR}: not set", "Hugging Face hub 'org/x': not tried (allow_hub=False)")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_place("org/x").skip == "not tried (HF_HUB_OFFLINE=1)"
    assert find_source([], has_data, "x").place is None


@pytest.mark.parametrize("value, offline", [("", False), ("0", False), ("false", False), ("1", True),
                                            ("TRUE", True), ("yes", True)])
def test_hub_offline_follows_hugging_face(monkeypatch, value, offline):
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    assert (hub_offline() is not None) is offline


def test_package_place_does_not_import(fake_package):
    import sys

    place = package_place("fake-data", "fakedata", "files")
    assert place.folder == fake_package.resolve() and "fakedata" not in sys.modules
    assert package_place("no-such-dist", "no_such_module_xyz").skip == "not installed"
    assert package_place("no-such-dist", "no_such_module_xyz.sub").skip == "not installed"
