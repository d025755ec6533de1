"""Spark's own floor on the export's own rows: the yardstick ``bench export`` holds the export to.

The floor is how fast this Spark writes Parquet when its data source decodes nothing. It must
be measured on the same rows as the export: Parquet's cost depends on the data (a column of
one repeated value is dictionary-encoded to almost nothing; distinct message ids, keys and
bodies are written out in full), so a floor of synthetic rows measures another workload.

So the rows an export wrote are staged as uncompressed Arrow IPC files, one per Parquet part
(the same partitioning), and :class:`ReplaySource` hands them to Spark from memory maps:
no decoding, no copy in the Python worker, the same Arrow batches to Spark's writer.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from export.schema import SCHEMA_DDL

BATCH_ROWS = 10_000  # about what the export's readers yield a batch


class StagedPartition(InputPartition):
    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


class ReplaySource(DataSource):
    """``spark.read.format("rocketdesk_replay").option("path", staged_dir)``."""

    @classmethod
    def name(cls) -> str:
        return "rocketdesk_replay"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema) -> ReplayReader:
        return ReplayReader(self.options["path"])


class ReplayReader(DataSourceReader):
    def __init__(self, path: str) -> None:
        self.path = path

    def partitions(self) -> list[StagedPartition]:
        return [StagedPartition(str(p)) for p in sorted(Path(self.path).glob("*.arrow"))]

    def read(self, partition: StagedPartition):
        import pyarrow as pa

        with pa.memory_map(partition.path) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)


def stage_rows(parquet_dir: Path, staged_dir: Path) -> int:
    """Copy an export's Parquet output into Arrow IPC files in the source's schema; rows staged."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from export.schema import arrow_schema

    schema = arrow_schema()
    staged_dir.mkdir(parents=True, exist_ok=True)
    rows = 0
    for i, part in enumerate(sorted(parquet_dir.glob("part-*.parquet"))):
        # Spark writes timestamps as INT96 (read back as ns, no zone) and names the map's fields
        # its own way: cast back to exactly what the rocketmq source yields.
        table = pq.read_table(part).select(schema.names).cast(schema)
        with pa.OSFile(str(staged_dir / f"part-{i:05d}.arrow"), "wb") as sink, \
                pa.ipc.new_file(sink, schema) as writer:
            for batch in table.to_batches(max_chunksize=BATCH_ROWS):
                writer.write_batch(batch)
        rows += table.num_rows
    return rows
