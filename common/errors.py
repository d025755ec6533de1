"""The root of every error RocketDesk raises on purpose.

::

    RocketDeskError                  str() is a sentence for people
    ├── StoreError            storage/errors.py     (PutMessageError, RecordError, ConfigError…)
    ├── RemotingError         cluster/remoting/errors.py  (HeaderError, BrokerResponseError…)
    ├── HAError               cluster/ha/errors.py
    ├── NamesrvError          cluster/namesrv/errors.py
    ├── SupervisorError       cluster/supervisor/errors.py
    ├── MQClientError         cluster/client/errors.py (ClientArgumentError, also a ValueError)
    ├── SettingError          cluster/settings.py   (also a ValueError; ServerConfigError)
    ├── FilterSyntaxError     cluster/filter/sql92.py  (also a ValueError)
    ├── ExportError           export/errors.py
    └── ConsoleError          gui/tasks.py

The command line and the console catch this one class at their single boundary and show its
sentence; anything else that escapes is a bug, shown as one and logged with its traceback.
"""

from __future__ import annotations


class RocketDeskError(Exception):
    """Base of every error tree; its message is meant for the person who hit it."""
