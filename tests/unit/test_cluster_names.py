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


def test_a_spec_comes_back_from_the_toml_the_cluster_keeps_whatever_its_strings_hold():
    """A cluster keeps its spec as TOML: a quoted word in the description, a Windows path in
    a broker setting, a dotted setting name, a line break, DEL, any script (written raw, they
    made the file unreadable: "Expected newline", "Unescaped '\\'")."""
    import tomllib

    from cluster.supervisor.spec import spec_from_dict

    spec = spec_from_dict({
        "name": "odd", "description": 'my "test" cluster \\ \x7f é 😀',
        "groups": [{"name": "a", "conf": {"brokerIP1": "127.0.0.1", "x.y": "D:\\mq\nz\t"}}]})
    assert spec_from_dict(tomllib.loads(spec.to_toml())) == spec


@pytest.mark.parametrize("conf", [3, "x", ["a"]])
def test_a_groups_conf_that_is_not_a_table_is_a_sentence(conf):
    from cluster.supervisor.spec import spec_from_dict

    with pytest.raises(SpecError, match=r"groups\[0\]\.conf must be a table"):
        spec_from_dict({"name": "c", "groups": [{"name": "a", "conf": conf}]})


def test_a_state_file_with_fields_a_newer_version_wrote_still_opens(home):
    import json

    made = Supervisor.create(load_profile("single"), "newer")
    path = clusters_dir() / "newer" / "cluster.json"
    data = json.loads(path.read_text())
    data["nodes"][0]["grpc_port"] = 8081
    data["epoch"] = 3
    path.write_text(json.dumps(data))
    again = Supervisor.attach("newer")
    assert [n.name for n in again.state.nodes] == [n.name for n in made.state.nodes]
    path.write_text(json.dumps({"nodes": 3}))
    with pytest.raises(ClusterNotFoundError, match="not a cluster's state file"):
        Supervisor.attach("newer")
