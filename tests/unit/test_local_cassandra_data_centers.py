"""A local cluster of several data centers: which node is in which, the snitch that reads it,
and the per-node rackdc file its JVM is pointed at (no server). Every other cluster keeps
SimpleSnitch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cassieq_dev.local_cassandra import (
    DATA_CENTER_SNITCH,
    DEFAULT_SNITCH,
    RACKDC_PROPERTY,
    JvmExtras,
    LocalCassandra,
    NodeConfig,
    data_center_layout,
    jvm_args,
    rackdc_extras,
    rackdc_properties,
    recorded_nodes,
    render_yaml,
)


def snitch_line(text: str) -> str:
    [line] = [ln for ln in text.splitlines() if ln.startswith("endpoint_snitch:")]
    return line.split(":", 1)[1].strip()


@pytest.fixture
def lib_dir(tmp_path: Path) -> Path:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "jamm-0.4.0.jar").touch()
    return lib


def test_nodes_fill_the_data_centers_in_order() -> None:
    assert data_center_layout([("dc1", 2), ("dc2", 1)], 3) == {1: "dc1", 2: "dc1", 3: "dc2"}
    assert data_center_layout([("a", 1)], 1) == {1: "a"}


@pytest.mark.parametrize(
    "layout, nodes, message",
    [
        ([("dc1", 2), ("dc2", 1)], 4, "hold 3 nodes and the cluster has 4"),
        ([("dc1", 2), ("dc1", 1)], 3, "named twice"),
        ([("dc1", 0), ("dc2", 3)], 3, "at least one node"),
        ([("dc 1", 3)], 3, "letters, digits"),
        ([("", 3)], 3, "letters, digits"),
        ([("dc1", True)], 1, "at least one node"),
    ],
)
def test_a_layout_that_does_not_fit_the_cluster_is_refused(
    layout: list[tuple[str, int]], nodes: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        data_center_layout(layout, nodes)


def test_a_cluster_without_data_centers_keeps_simple_snitch(tmp_path: Path, lib_dir: Path) -> None:
    cluster = LocalCassandra(nodes=3, port=19042, storage_port=17000, base_dir=tmp_path)
    for i in (1, 2, 3):
        node = cluster.node(i)
        assert node.data_center is None and node.snitch == DEFAULT_SNITCH == "SimpleSnitch"
        assert snitch_line(render_yaml(node)) == "SimpleSnitch"
        assert "data_center" not in node.record()
        assert not any(a.startswith(f"-D{RACKDC_PROPERTY}=") for a in jvm_args(node, "1G", lib_dir))
        assert rackdc_extras(node) is None
    with pytest.raises(ValueError, match="no data center"):
        rackdc_properties(cluster.node(1))


def test_nodes_of_data_centers_run_the_gossiping_snitch_with_a_rackdc_file_each(
    tmp_path: Path, lib_dir: Path
) -> None:
    cluster = LocalCassandra(
        nodes=3,
        port=29042,
        storage_port=27000,
        base_dir=tmp_path,
        data_centers=[("dc1", 2), ("dc2", 1)],
    )
    nodes = [cluster.node(i) for i in (1, 2, 3)]
    assert [n.data_center for n in nodes] == ["dc1", "dc1", "dc2"]
    for node in nodes:
        assert node.snitch == DATA_CENTER_SNITCH == "GossipingPropertyFileSnitch"
        assert snitch_line(render_yaml(node)) == DATA_CENTER_SNITCH
        assert node.record()["data_center"] == node.data_center
        assert rackdc_properties(node) == f"dc={node.data_center}\nrack=rack1\n"
        args = jvm_args(node, "384M", lib_dir, extras=rackdc_extras(node))
        props = dict(a[2:].split("=", 1) for a in args if a.startswith("-D"))
        # Cassandra reads the property as a URL: a file URI of this node's own file.
        assert props[RACKDC_PROPERTY] == node.rackdc_path.resolve().as_uri()
        assert props[RACKDC_PROPERTY].startswith("file:")
        assert node.rackdc_path.parent == node.node_dir
    # A node's own extras keep theirs and win over the launcher's.
    own = JvmExtras(props={"cassandra.clock": "X", RACKDC_PROPERTY: "file:/elsewhere"})
    merged = rackdc_extras(nodes[2], own)
    assert merged is not None and merged.props["cassandra.clock"] == "X"
    assert merged.props[RACKDC_PROPERTY] == "file:/elsewhere"


def test_a_recorded_node_keeps_its_data_center(tmp_path: Path) -> None:
    node = NodeConfig(3, 3, 29042, 27000, tmp_path, "two-dc", durable=True, data_center="dc2")
    node.node_dir.mkdir(parents=True)
    (node.node_dir / "node.json").write_text(json.dumps(node.record()))
    [found] = recorded_nodes(tmp_path)
    assert found.data_center == "dc2" and found.snitch == DATA_CENTER_SNITCH
