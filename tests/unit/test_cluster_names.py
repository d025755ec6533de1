"""A cluster's name is one folder inside the data folder's clusters/: never "..", a path or a
drive (`rocketdesk up --name ..` laid a cluster over the data folder itself, and `rm ..` then
deleted all of it, every other cluster included)."""

from __future__ import annotations

import os

import pytest

from cluster.supervisor.errors import ClusterNotFoundError, SpecError
from cluster.supervisor.spec import load_profile
from cluster.supervisor.state import clusters_dir
from cluster.supervisor.supervisor import Supervisor


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("ROCKETDESK_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.mark.parametrize("name", ["..", ".", "a/b", "a\\b", "C:", "x" * 65, "my.cluster", ""])
def test_a_new_cluster_needs_a_plain_name_and_nothing_is_laid_out_otherwise(home, name):
    with pytest.raises(SpecError, match="letters, digits"):
        Supervisor.create(load_profile("single"), name or "..")
    assert not home.exists() or not any(home.rglob("cluster.json"))


def test_only_a_folder_inside_clusters_is_ever_opened_or_removed(home):
    kept = Supervisor.create(load_profile("single"), "kept")
    planted = clusters_dir().parent / "cluster.json"  # what `up --name ..` used to write
    planted.write_text((clusters_dir() / "kept" / "cluster.json").read_text())
    for name in ("..", ".", "", "../home", "kept/..", "..\\kept"):
        with pytest.raises(ClusterNotFoundError, match="no cluster named"):
            Supervisor.attach(name)
    assert planted.exists()
    assert Supervisor.attach("kept").state.name == "kept"
    # One made before names were checked (a dot in it) still opens, and can be removed.
    os.rename(kept.state.dir, clusters_dir() / "my.cluster")
    Supervisor.attach("my.cluster")
