"""docs/spark.md's option reference is the option table (spark/option_table.py) printed: the
page's table must be exactly what ``markdown_table()`` makes, every connection option has its
row, and what a query type refuses as unknown is what the table says it does not take."""

from __future__ import annotations

import pytest
from support.docs_blocks import ROOT

from cassieq_spark.config import CONNECTION_OPTIONS
from cassieq_spark.engine.core.queues import DEFAULT_SETTINGS
from cassieq_spark.errors import ConfigError
from cassieq_spark.spark import option_table
from cassieq_spark.spark.options import parse_source_settings, sink_options

pytestmark = pytest.mark.unit

REGENERATE = "python -m cassieq_spark.spark.option_table"


def _page_table() -> str:
    text = (ROOT / "docs" / "spark.md").read_text(encoding="utf-8")
    section = text.split("\n## Options\n", 1)[1].split("\n## ", 1)[0]
    assert option_table.HEADER in section, "docs/spark.md's Options section has no option table"
    table = option_table.HEADER + section.split(option_table.HEADER, 1)[1].split("\n\n", 1)[0]
    return table.rstrip("\n") + "\n"


def test_the_page_table_is_the_generated_one() -> None:
    page, made = _page_table(), option_table.markdown_table()
    differ = sorted(set(page.splitlines()) ^ set(made.splitlines()))
    assert page == made, (
        f"docs/spark.md's option table differs from the option table; paste the output of "
        f"`{REGENERATE}` in its place. Rows that differ: {differ}"
    )


def test_every_connection_option_has_a_row() -> None:
    keys = {o.key for o in option_table.OPTIONS}
    assert not sorted(set(CONNECTION_OPTIONS) - keys)
    for key in CONNECTION_OPTIONS:
        assert option_table.OPTIONS_BY_KEY[key].types == option_table.ALL


def test_names_are_unique_and_documented_but_spark_own() -> None:
    names = [o.key for o in option_table.OPTIONS]
    assert len(names) == len(set(names))
    hidden = {o.name for o in option_table.OPTIONS if not o.documented}
    assert hidden == {"path", "queryName"}  # what Spark adds to a sink's options


def test_queue_settings_default_to_the_queue_defaults() -> None:
    for o in option_table.QUEUE_SETTINGS:
        assert o.default == getattr(DEFAULT_SETTINGS, str(o.queue_setting)), o.name


@pytest.mark.parametrize("role", ["sink", "source"])
def test_unknown_option_names_the_closest_and_every_allowed_one(role: str) -> None:
    parse = sink_options if role == "sink" else parse_source_settings
    with pytest.raises(ConfigError) as err:
        parse({"queue": "q", "maxdeliverycont": "3"})
    message = str(err.value)
    assert f"unknown option 'maxdeliverycont' for the cassieq {role}" in message
    assert "(did you mean 'maxDeliveryCount'?)" in message
    listed = message.split("allowed: ", 1)[1].split(", ")
    taken = option_table.ROLE_TYPES[role]
    assert sorted(listed) == sorted(o.name for o in option_table.OPTIONS if o.types & taken)


def test_every_option_a_query_type_does_not_take_is_refused() -> None:
    for o in option_table.OPTIONS:
        given = {"queue": "q", o.name: "1"}
        for role, parse in (("sink", sink_options), ("source", parse_source_settings)):
            if o.types & option_table.ROLE_TYPES[role]:
                continue
            with pytest.raises(ConfigError, match=f"unknown option '{o.key}'"):
                parse(given)
