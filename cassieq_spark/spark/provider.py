"""``CassieQDataSource``: the ``cassieq`` format for Spark's Python Data Source API."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .schema import SOURCE_SCHEMA


class CassieQDataSource(DataSource):
    """Messages of a CassieQ queue: read them as a stream, write rows as messages.

    ``df.writeStream.format("cassieq").option("queue", "events")...`` and
    ``df.write.format("cassieq").option("queue", "events").mode("append").save()``; see
    ``cassieq_spark.spark.option_table`` for every option.
    """

    @classmethod
    def name(cls) -> str:
        return "cassieq"

    def schema(self) -> StructType:
        # Spark asks for the schema in load(): the place to reject bad options before a
        # query starts. A write also passes through here, so sink-only options are let by.
        from .option_table import SINK, only_for
        from .options import check_any_role

        if {str(k).lower() for k in self.options} & only_for(SINK):
            check_any_role(self.options)
        else:
            from .options import parse_source_settings

            parse_source_settings(self.options)
        return SOURCE_SCHEMA

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import batch_writer

        return batch_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import stream_writer

        return stream_writer(self.options, schema, overwrite)

    def reader(self, schema: StructType) -> DataSourceReader:
        try:
            from .source import CassieQBatchReader
        except ImportError as exc:
            raise NotImplementedError(
                "spark.read.format('cassieq') is not available yet (cassieq_spark.spark.source)"
            ) from exc
        return CassieQBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            from .source import CassieQStreamReader
        except ImportError as exc:
            raise NotImplementedError(
                "spark.readStream.format('cassieq') is not available yet "
                "(cassieq_spark.spark.source)"
            ) from exc
        return CassieQStreamReader(self.options, schema)
