"""The compiled core (common/_speedups.c for the remoting codec, common/_storecore.c for the
store's per-record work); everything else is declared in pyproject.toml.

``optional=True``: where no C compiler is found the install still succeeds, and
common/speedups.py runs the pure-Python twins instead. An editable install
(``pip install -e .``, as ./dev.sh does) builds the module next to its source.
"""

import sys

from setuptools import Extension, setup

if sys.platform == "win32":
    _FLAGS = ["/O2"]
else:
    _FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]

setup(
    ext_modules=[
        Extension("common._speedups", ["common/_speedups.c", "common/_send_fields.c"],
                  depends=["common/_text.h", "common/_header_fields.h", "common/_properties.h"],
                  extra_compile_args=_FLAGS, optional=True),
        Extension("common._storecore", ["common/_storecore.c", "common/_populator.c",
                                                "common/_dispatch_run.c", "common/_dispatch_one.c",
                                                "common/_pull_gather.c",
                                                "common/_append.c", "common/_range_sync.c",
                                                "common/_put_counter.c",
                                                "common/_property_split.c", "common/_record_cut.c",
                                                "common/_crc32.c",
                                                "common/_record_scan.c", "common/_batch_body.c"],
                  depends=["common/_text.h", "common/_bytes.h", "common/_index_entry.h",
                           "common/_properties.h", "common/_record.h", "common/_append.h",
                           "common/_file_write.h",
                           "common/_populator.h", "common/_range_sync.h", "common/_put_counter.h",
                           "common/_dispatch_run.h", "common/_dispatch_entry.h",
                           "common/_dispatch_one.h",
                           "common/_pull_gather.h",
                           "common/_property_split.h", "common/_record_cut.h", "common/_vectors.h",
                           "common/_crc32.h",
                           "common/_record_scan.h", "common/_batch_body.h"],
                  extra_compile_args=_FLAGS, optional=True),
    ],
)
