"""Spark export: a ``rocketmq`` data source for PySpark and the export job behind
``rocketdesk export``. Planning and decoding are plain Python (tested without Spark); only
``datasource`` and ``job`` import pyspark."""
