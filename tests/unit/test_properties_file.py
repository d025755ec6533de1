"""Node configuration files (cluster/properties.py): what the supervisor writes, a node reads
back unchanged, Windows paths included."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cluster.properties import format_properties, parse_properties

# Keys and values of any characters (but lone surrogates, which no file can hold as UTF-8).
TEXT = st.text(st.characters(blacklist_categories=("Cs",)))


def test_a_windows_store_path_reads_back_as_written():
    path = r"C:\Users\me\AppData\Local\RocketDesk\rocketdesk\clusters\c\nodes\broker-a-0\store"
    assert parse_properties(format_properties({"storePathRootDir": path})) == {
        "storePathRootDir": path}  # unescaped, "\r" and "\U" would have been eaten


@given(st.dictionaries(TEXT.filter(bool), TEXT, max_size=8))
def test_any_keys_and_values_read_back_as_written(values):
    assert parse_properties(format_properties(values)) == values


def test_the_supervisor_writes_node_files_a_node_reads_back(tmp_path):
    from cluster.properties import load_properties
    from cluster.supervisor.spec import ClusterSpec, GroupSpec
    from cluster.supervisor.supervisor import Supervisor

    root = tmp_path / "a\\b"  # (a backslash is a file name character on Linux: Windows' paths)
    supervisor = Supervisor.create(ClusterSpec(name="c", groups=[GroupSpec("broker-a")]), root=root)
    broker = next(n for n in supervisor.state.nodes if n.kind == "broker")
    assert "\\" in broker.store_dir
    assert load_properties(broker.conf_path)["storePathRootDir"] == broker.store_dir
