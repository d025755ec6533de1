"""Every error tree hangs under RocketDeskError, and the two boundaries show its sentence."""

from __future__ import annotations

import pytest

from cluster.client.errors import ClientArgumentError, MQClientError
from cluster.filter.sql92 import FilterSyntaxError
from cluster.ha.errors import HAError
from cluster.remoting.errors import BrokerResponseError, RemotingError
from cluster.remoting.header import HeaderError
from cluster.remoting.server import ServerConfigError
from cluster.settings import SettingError
from cluster.supervisor.errors import SupervisorError
from common.errors import RocketDeskError
from export.errors import ExportError
from storage.errors import MessageIllegalError, StoreError


@pytest.mark.parametrize("kind", [StoreError, MessageIllegalError, RemotingError, HeaderError,
                                  BrokerResponseError, ServerConfigError, HAError, SupervisorError,
                                  MQClientError, ClientArgumentError, SettingError,
                                  FilterSyntaxError, ExportError])
def test_every_error_tree_hangs_under_one_root(kind):
    assert issubclass(kind, RocketDeskError)


def test_the_command_line_shows_the_sentence_of_any_of_them(capsys, monkeypatch, tmp_path):
    from rocketdesk import cli

    monkeypatch.setenv("ROCKETDESK_HOME", str(tmp_path))
    assert cli.main(["status", "--name", "nope"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rocketdesk: ")
    assert "nope" in err
    assert "Traceback" not in err


def test_the_console_shows_a_sentence_and_never_python_s_text():
    from gui.tasks import ConsoleError, user_message

    assert user_message(ConsoleError("no cluster is open")) == "no cluster is open"
    assert user_message(ConnectionRefusedError(111, "Connection refused")) == "Connection refused"
    assert user_message(KeyError("x")) == "unexpected error (KeyError); the details are in the log"
