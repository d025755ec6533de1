"""Spark's own ceiling on this machine: how fast local[2] writes rows of the ``rocketmq`` schema
when the data source decodes nothing (it yields one pre-built Arrow batch of 1 KiB bodies again
and again). No decoder can make an export faster than this.

    .venv/bin/python scripts/bench_spark_floor.py [noop] [parquet]   (ROWS=per partition, PARTS)
"""
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

ROWS_PER_PART = int(os.environ.get("ROWS", "50000"))
PARTS = int(os.environ.get("PARTS", "8"))
BATCH = 10_000
UNIQ = "7F0000010DF218B4AAC2A1B2C3D40000"

def make_batch(n):
    import pyarrow as pa

    from export.schema import arrow_schema
    body = os.urandom(1024)
    s = arrow_schema()
    cols = {
        "topic": pa.array(["BenchExport"] * n), "brokerName": pa.array(["broker-a"] * n),
        "queueId": pa.array([1] * n, pa.int32()), "queueOffset": pa.array(range(n), pa.int64()),
        "commitLogOffset": pa.array(range(n), pa.int64()),
        "msgId": pa.array(["7F00000100002A9F0000000000001234"] * n),
        "uniqKey": pa.array([UNIQ] * n), "keys": pa.array([f"k{i}" for i in range(n)]),
        "tags": pa.array([None] * n, pa.string()), "body": pa.array([body] * n, pa.binary()),
        "bodyText": pa.array([None] * n, pa.string()),
        "properties": pa.MapArray.from_arrays(pa.array([3 * i for i in range(n + 1)], pa.int32()),
                                              pa.array(["KEYS", "UNIQ_KEY", "WAIT"] * n),
                                              pa.array(["k1", UNIQ, "true"] * n)),
        "bornTimestamp": pa.array([1_700_000_000_000_000] * n, s.field("bornTimestamp").type),
        "storeTimestamp": pa.array([1_700_000_000_000_000] * n, s.field("storeTimestamp").type),
        "bornHost": pa.array(["127.0.0.1:50000"] * n), "storeHost": pa.array(["127.0.0.1:10911"] * n),
        "reconsumeTimes": pa.array([0] * n, pa.int32()), "sysFlag": pa.array([0] * n, pa.int32()),
    }
    return pa.RecordBatch.from_arrays([cols[f.name] for f in s], schema=s)

class P(InputPartition):
    pass

class Floor(DataSource):
    @classmethod
    def name(cls): return "floor"
    def schema(self):
        from export.schema import SCHEMA_DDL
        return SCHEMA_DDL
    def reader(self, schema): return R()

class R(DataSourceReader):
    def partitions(self): return [P(i) for i in range(PARTS)]
    def read(self, partition):
        b = make_batch(BATCH)
        for _ in range(ROWS_PER_PART // BATCH):
            yield b

spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.log.level", "ERROR").config("spark.ui.showConsoleProgress", "false").getOrCreate())
spark.dataSource.register(Floor)
OUT = Path(tempfile.mkdtemp(prefix="rocketdesk-spark-floor-"))
spark.read.format("floor").load().limit(10).count()
total = ROWS_PER_PART * PARTS
for fmt in sys.argv[1:] or ["noop", "parquet"]:
    for rnd in range(2):
        df = spark.read.format("floor").load()
        t = time.perf_counter()
        if fmt == "noop":
            df.write.format("noop").mode("overwrite").save()
        else:
            df.write.mode("overwrite").parquet(str(OUT / fmt))
        took = time.perf_counter() - t
        print(f"{fmt} round {rnd}: {total:,} rows in {took:.2f} s = {total/took:,.0f} rows/s", flush=True)
spark.stop()
shutil.rmtree(OUT, ignore_errors=True)
