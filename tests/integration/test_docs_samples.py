"""Every ```python block of README.md and docs/*.md runs against the real Cassandra.

The blocks of one page run in order in one namespace (a page is one session, as a reader types
it), in a fresh keyspace, with ``spark`` a local SparkSession for the pages that use it. The pages
show the connection a newcomer types (127.0.0.1, keyspace ``cassieq``, checkpoints under
``/tmp/ck``); the test points exactly those spellings at its own Cassandra, keyspace and temporary
directory (:func:`rewrites_for`), and refuses a block that would still reach keyspace ``cassieq``.
A block is skipped only with ``<!-- not-run: why -->`` on the line before it.
"""

from __future__ import annotations

import re
import traceback
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.docs_blocks import PAGES, ROOT, Block, blocks

from cassieq_spark import QueueClient


def _python_blocks(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.lang == "python"]


def _needs_spark(page: Path) -> bool:
    return any("spark." in b.code for b in _python_blocks(page) if b.not_run is None)


SAMPLE_PAGES = [
    pytest.param(
        p,
        id=p.relative_to(ROOT).as_posix(),
        marks=[pytest.mark.spark] if _needs_spark(p) else [],
    )
    for p in PAGES
    # A page whose every sample is marked not-run (each with its reason: docs_blocks checks
    # that) has nothing to run here.
    if any(b.not_run is None for b in _python_blocks(p))
]


def rewrites_for(hosts: list[str], port: int, keyspace: str, tmp: Path) -> list[tuple[str, str]]:
    points = ",".join(hosts)
    return [
        ('QueueClient.connect(["127.0.0.1"],', f"QueueClient.connect({hosts!r}, port={port},"),
        ('keyspace="cassieq"', f'keyspace="{keyspace}"'),
        ('"contactPoints": "127.0.0.1"', f'"contactPoints": "{points}"'),
        ('"port": "9042"', f'"port": "{port}"'),
        ('"keyspace": "cassieq"', f'"keyspace": "{keyspace}"'),
        ('"/tmp/ck/', f'"{tmp}/ck/'),
    ]


def _pointed(block: Block, rewrites: list[tuple[str, str]], keyspace: str) -> str:
    code = block.code
    for old, new in rewrites:
        code = code.replace(old, new)
    if re.search(r"keyspace\W{1,4}cassieq\b", code):
        pytest.fail(f"{block.where}: names keyspace 'cassieq' in a way this test cannot redirect")
    connects = re.search(r'QueueClient\.\w+\(|format\("cassieq"\)', code)
    if connects and keyspace not in code and "**cassandra" not in code:
        pytest.fail(
            f"{block.where}: connects without naming its keyspace: it would use the default "
            "'cassieq'; name it (keyspace=... or .options(**cassandra))"
        )
    return code


def _run_page(page: Path, namespace: dict[str, Any], rewrites, keyspace: str) -> int:
    ran = 0
    for block in _python_blocks(page):
        if block.not_run is not None:
            continue
        code = compile(_pointed(block, rewrites, keyspace), block.where, "exec")
        try:
            exec(code, namespace)
        except Exception:
            pytest.fail(f"{block.where} raised:\n{traceback.format_exc(limit=-6)}")
        ran += 1
    return ran


@pytest.mark.parametrize("page", SAMPLE_PAGES)
def test_python_samples_run(page: Path, cassandra, request, tmp_path: Path) -> None:
    keyspace = f"docs_{uuid.uuid4().hex[:12]}"
    rewrites = rewrites_for(list(cassandra.contact_points), cassandra.port, keyspace, tmp_path)
    spark = request.getfixturevalue("spark") if _needs_spark(page) else None
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    if spark is not None:
        namespace["spark"] = spark
    # Client samples bootstrap it again (idempotent); Spark samples expect it bootstrapped.
    with QueueClient.connect(
        list(cassandra.contact_points), port=cassandra.port, keyspace=keyspace
    ) as c:
        c.bootstrap(create_keyspace=True)
    try:
        ran = _run_page(page, namespace, rewrites, keyspace)
        assert ran, f"{page.name}: every python block is marked not-run"
        if spark is not None:
            # A query fails in the background: the ones the page kept, stopped or not, and any
            # still running must have no exception.
            from pyspark.sql.streaming import StreamingQuery

            queries = {q.id: q for q in spark.streams.active}
            queries |= {q.id: q for q in namespace.values() if isinstance(q, StreamingQuery)}
            failed = {q.name or q.id: str(q.exception()) for q in queries.values() if q.exception()}
            assert not failed, f"streaming queries of {page.name} failed: {failed}"
    finally:
        if spark is not None:
            for query in spark.streams.active:
                query.stop()
        for value in namespace.values():
            if isinstance(value, QueueClient):
                value.close()
        cassandra.session().execute(f"DROP KEYSPACE IF EXISTS {keyspace}")


def test_a_sample_that_raises_fails_the_test(tmp_path: Path) -> None:
    page = tmp_path / "broken.md"
    page.write_text("```python\nx = 1\n```\n\n```python\nraise ValueError('drifted')\n```\n")
    namespace: dict[str, Any] = {}
    with pytest.raises(pytest.fail.Exception, match=r"broken.md:5 raised:(.|\n)*drifted"):
        _run_page(page, namespace, [], "ks")
    assert namespace["x"] == 1


def test_a_sample_reaching_the_default_keyspace_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "default.md"
    page.write_text(
        "intro\n\n<!-- not-run: shown only -->\n```python\nraise SystemExit\n```\n\n"
        '```python\nspark.read.format("cassieq").option("queue", "q").load()\n```\n'
    )
    with pytest.raises(pytest.fail.Exception, match="connects without naming its keyspace"):
        _run_page(page, {}, [], "docs_x")
