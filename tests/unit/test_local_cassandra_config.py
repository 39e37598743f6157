"""Rendering of the per-node cassandra.yaml and of the JVM command line (no server)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cassieq_dev.local_cassandra import (
    CONF_DIR,
    MAIN_CLASS,
    JvmExtras,
    LocalCassandra,
    NodeConfig,
    default_heap,
    initial_token,
    jvm_args,
    read_jvm_options,
    render_yaml,
)

MIN_TOKEN, MAX_TOKEN = -(2**63), 2**63 - 1


def parse(text: str) -> dict[str, object]:
    """Top-level keys of the rendered yaml (PyYAML is not a project dependency).

    Scalars become str/int/bool; a key whose value is an indented block maps to that block's
    ``- item`` values (for data_file_directories) or its ``key: value`` pairs (for seeds).
    """
    conf: dict[str, object] = {}
    key = None
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip()
        if not line or line.startswith("#"):
            continue
        if not line[0].isspace():
            key, _, value = line.partition(":")
            value = value.strip().strip("'")
            conf[key] = (
                int(value)
                if value.lstrip("-").isdigit()
                else {"true": True, "false": False}.get(value, value)
                if value
                else []
            )
            continue
        item = line.strip().removeprefix("- ")
        name, sep, value = item.partition(": ")
        conf[key].append((name, value.strip("'")) if sep else item)  # type: ignore[union-attr]
    return conf


def seeds(conf: dict[str, object]) -> str:
    return dict(p for p in conf["seed_provider"] if isinstance(p, tuple))["seeds"]  # type: ignore[union-attr]


def make_node(tmp_path: Path, index: int = 1, nodes: int = 1, **kw: object) -> NodeConfig:
    args: dict[str, object] = dict(
        index=index,
        nodes=nodes,
        port=9042,
        storage_port=7000,
        base_dir=tmp_path,
        cluster_name="unit-test",
    )
    args.update(kw)
    return NodeConfig(**args)  # type: ignore[arg-type]


@pytest.fixture
def lib_dir(tmp_path: Path) -> Path:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "jamm-0.4.0.jar").touch()
    return lib


def test_single_node_yaml(tmp_path: Path) -> None:
    conf = parse(render_yaml(make_node(tmp_path)))
    node_dir = (tmp_path / "1").as_posix()
    assert conf["cluster_name"] == "unit-test"
    assert conf["listen_address"] == conf["rpc_address"] == "127.0.0.1"
    assert conf["native_transport_port"] == 9042
    assert conf["storage_port"] == 7000
    assert conf["num_tokens"] == 1
    assert conf["initial_token"] == 0
    assert seeds(conf) == "127.0.0.1"
    assert conf["data_file_directories"] == [f"{node_dir}/data"]
    for key, sub in [
        ("commitlog_directory", "commitlog"),
        ("saved_caches_directory", "saved_caches"),
        ("hints_directory", "hints"),
        ("cdc_raw_directory", "cdc_raw"),
    ]:
        assert conf[key] == f"{node_dir}/{sub}"
    assert conf["commitlog_sync"] == "periodic"
    assert conf["auto_snapshot"] is False
    assert conf["concurrent_compactors"] == 1
    assert conf["storage_compatibility_mode"] == "NONE"
    assert conf["cas_contention_timeout"].endswith("ms")
    assert 1000 <= int(conf["cas_contention_timeout"][:-2]) <= 10000  # type: ignore[index]


def test_cluster_nodes_differ_only_where_they_must(tmp_path: Path) -> None:
    confs = [
        parse(render_yaml(make_node(tmp_path, i, 3, port=19042, storage_port=17000)))
        for i in (1, 2, 3)
    ]
    assert [c["listen_address"] for c in confs] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert [c["rpc_address"] for c in confs] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert {c["native_transport_port"] for c in confs} == {19042}
    assert {c["storage_port"] for c in confs} == {17000}
    assert {seeds(c) for c in confs} == {"127.0.0.1"}
    assert len({c["initial_token"] for c in confs}) == 3
    assert len({c["data_file_directories"][0] for c in confs}) == 3


@pytest.mark.parametrize("nodes", [1, 2, 3, 5])
def test_tokens_are_spread_and_valid(nodes: int) -> None:
    tokens = [initial_token(i, nodes) for i in range(1, nodes + 1)]
    assert len(set(tokens)) == nodes
    assert all(MIN_TOKEN < t <= MAX_TOKEN for t in tokens)
    ring = sorted(t % 2**64 for t in tokens)
    assert initial_token(1, 1) == 0
    gaps = [b - a for a, b in zip(ring, ring[1:] + [ring[0] + 2**64], strict=True)]
    assert max(gaps) - min(gaps) <= 1


def test_template_has_no_unfilled_placeholder(tmp_path: Path) -> None:
    text = render_yaml(make_node(tmp_path))
    assert "${" not in text
    template_keys = {k for k in parse((CONF_DIR / "cassandra.yaml").read_text()) if "${" not in k}
    # The commitlog lines are a placeholder of their own (they differ in durable mode).
    placeholders = {"commitlog_sync", "commitlog_sync_period", "authenticator", "authorizer"}
    placeholders.add("client_encryption_options")
    assert template_keys | placeholders == set(parse(text))


def test_jvm_args_contain_required_flags(tmp_path: Path, lib_dir: Path) -> None:
    node = make_node(tmp_path, 2, 3, port=19042, storage_port=17000)
    args = jvm_args(node, "384M", lib_dir=lib_dir)
    assert args[:2] == ["-Xms384M", "-Xmx384M"]
    assert args[-1] == MAIN_CLASS
    assert args[args.index("-cp") + 1].endswith(f"{lib_dir}/*")
    assert f"-javaagent:{lib_dir / 'jamm-0.4.0.jar'}" in args
    assert "-XX:+UseG1GC" in args
    for required in [
        "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
        "--add-exports=jdk.attach/sun.tools.attach=ALL-UNNAMED",
        "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
        "--add-opens=java.base/java.lang=ALL-UNNAMED",
        "--add-opens=java.base/jdk.internal.loader=ALL-UNNAMED",
        "-Djdk.attach.allowAttachSelf=true",
        "-Dio.netty.tryReflectionSetAccessible=true",
    ]:
        assert required in args, required
    props = dict(a[2:].split("=", 1) for a in args if a.startswith("-D"))
    assert props["cassandra.config"] == (tmp_path / "2" / "cassandra.yaml").resolve().as_uri()
    assert props["cassandra.config"].startswith("file:")
    assert props["cassandra.storagedir"] == str(tmp_path / "2")
    assert props["cassandra.logdir"] == str(tmp_path / "2" / "logs")
    assert props["cassandra-foreground"] == "yes"
    assert props["logback.configurationFile"].endswith("conf/logback.xml")
    assert props["cassandra.skip_wait_for_gossip_to_settle"] == "0"
    assert props["cassandra.superuser_setup_delay_ms"] == "0"
    assert int(props["cassandra.ring_delay_ms"]) > 0
    assert props["cassandra.available_processors"] == "2"
    assert props["cassandra.initial_token"] == str(initial_token(2, 3))
    assert props["cassandra.native_transport_port"] == "19042"
    assert props["cassandra.storage_port"] == "17000"


def test_a_node_s_jvm_extras_add_properties_and_classpath_and_win_over_the_defaults(
    tmp_path: Path, lib_dir: Path
) -> None:
    node = make_node(tmp_path, 1, 3)
    plain = jvm_args(node, "384M", lib_dir=lib_dir)
    extras = JvmExtras(
        props={"cassandra.clock": "OffsetClock", "cassandra.ring_delay_ms": "7"},
        classpath=(tmp_path / "classes",),
    )
    args = jvm_args(node, "384M", lib_dir=lib_dir, extras=extras)
    props = dict(a[2:].split("=", 1) for a in args if a.startswith("-D"))
    assert props["cassandra.clock"] == "OffsetClock"
    assert props["cassandra.ring_delay_ms"] == "7"
    assert sum(a.startswith("-Dcassandra.ring_delay_ms=") for a in args) == 1
    classpath = args[args.index("-cp") + 1].split(os.pathsep)
    assert str(tmp_path / "classes") in classpath and classpath[-1] == f"{lib_dir}/*"
    assert "-Dcassandra.clock=OffsetClock" not in plain


def test_jvm_options_file_has_the_java17_module_flags() -> None:
    options = read_jvm_options()
    assert all(o.startswith("-") for o in options)
    assert sum(o.startswith("--add-exports=") for o in options) == 9
    assert sum(o.startswith("--add-opens=") for o in options) == 15


def test_jvm_args_need_the_jars(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="make setup"):
        jvm_args(make_node(tmp_path), "512M", lib_dir=tmp_path)


def test_launcher_defaults(tmp_path: Path) -> None:
    assert default_heap(1) == "1G"
    assert default_heap(3) == "512M"
    single = LocalCassandra(base_dir=tmp_path)
    assert single.contact_points == ["127.0.0.1"]
    assert single.port == 9042
    assert single.heap == "1G"
    cluster = LocalCassandra(nodes=3, port=19042, storage_port=17000, base_dir=tmp_path)
    assert cluster.contact_points == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert cluster.heap == "512M"
    assert cluster.node(3).node_dir == tmp_path.resolve() / "3"
    assert not cluster.is_node_running(1)  # no pid file there
    with pytest.raises(ValueError):
        cluster.node(4)


def test_durable_node_syncs_before_acknowledging(tmp_path: Path, lib_dir: Path) -> None:
    fast = NodeConfig(1, 1, 9042, 7000, tmp_path, "unit-test")
    durable = NodeConfig(1, 1, 9042, 7000, tmp_path, "unit-test", durable=True)
    fast_conf, durable_conf = parse(render_yaml(fast)), parse(render_yaml(durable))
    assert fast_conf["commitlog_sync"] == "periodic"
    assert durable_conf["commitlog_sync"] == "batch"
    # Cassandra refuses batch mode with a sync period, so the key must be gone, not just ignored.
    assert "commitlog_sync_period" not in durable_conf
    fast_props = {a for a in jvm_args(fast, "512M", lib_dir=lib_dir) if a.startswith("-D")}
    durable_props = {a for a in jvm_args(durable, "512M", lib_dir=lib_dir) if a.startswith("-D")}
    assert {"-Dcassandra.skip_sync=true", "-Dcassandra.unsafesystem=true"} <= fast_props
    assert not any("skip_sync" in a or "unsafesystem" in a for a in durable_props)
    assert durable.record()["durable"] is True and "durable" not in fast.record()
    assert LocalCassandra(base_dir=tmp_path, durable=True).node(1).durable


def test_secured_node_requires_passwords_and_tls(tmp_path: Path) -> None:
    open_conf = parse(render_yaml(NodeConfig(1, 1, 9042, 7000, tmp_path, "unit-test")))
    assert open_conf["authenticator"] == "AllowAllAuthenticator"
    secured = NodeConfig(1, 1, 9042, 7000, tmp_path, "unit-test", auth=True, tls="mutual")
    text = render_yaml(secured)
    conf = parse(text)
    assert conf["authenticator"] == "PasswordAuthenticator"
    assert conf["authorizer"] == "CassandraAuthorizer"
    assert conf["role_manager"] == "CassandraRoleManager"
    tls = text.split("client_encryption_options:", 1)[1]
    for line in (
        "enabled: true",
        "optional: false",  # no plaintext client on the CQL port
        "require_client_auth: true",
        f"keystore: {(tmp_path / 'tls' / 'node.p12').as_posix()}",
        f"truststore: {(tmp_path / 'tls' / 'truststore.p12').as_posix()}",
    ):
        assert f"\n  {line}\n" in tls, line
    assert secured.record()["auth"] is True and secured.record()["tls"] == "mutual"
    server_only = render_yaml(NodeConfig(1, 1, 9042, 7000, tmp_path, "unit-test", tls="on"))
    assert "require_client_auth: false" in server_only and "truststore:" not in server_only
    with pytest.raises(ValueError, match="tls must be"):
        LocalCassandra(base_dir=tmp_path, tls="yes please")
