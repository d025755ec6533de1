"""Cluster specs: name servers and broker groups (a master and its slaves), in TOML.

A spec names what RocketMQ's own deployment would: how many name servers, and per broker group
its master's role (ASYNC_MASTER or SYNC_MASTER), flush type, slave count, CommitLog file size and
any further broker.conf keys. Built-in profiles live in ``resources/profiles``.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from cluster.supervisor.errors import SpecError

MASTER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER")
FLUSH_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SIZE = re.compile(r"(\d+)\s*([KMG]i?B)?", re.IGNORECASE)
_UNITS = {"": 1, "kb": 1 << 10, "kib": 1 << 10, "mb": 1 << 20, "mib": 1 << 20, "gb": 1 << 30,
          "gib": 1 << 30}
# Keys the supervisor owns: a spec cannot set them through ``conf``.
_RESERVED = {"brokerName", "brokerId", "brokerRole", "listenPort", "haListenPort", "namesrvAddr",
             "storePathRootDir", "brokerClusterName"}


@dataclass(slots=True)
class GroupSpec:
    name: str
    master_role: str = "ASYNC_MASTER"
    flush: str = "ASYNC_FLUSH"
    slaves: int = 0
    commitlog_file_size: int = 1 << 30
    conf: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class ClusterSpec:
    name: str
    namesrv: int = 1
    cluster: str = "DefaultCluster"
    prefer_default_ports: bool = False
    groups: list[GroupSpec] = field(default_factory=list)
    description: str = ""

    def to_toml(self) -> str:
        q = _toml_string
        lines = [f"name = {q(self.name)}", f"description = {q(self.description)}",
                 f"namesrv = {self.namesrv}", f"cluster = {q(self.cluster)}",
                 f"prefer_default_ports = {str(self.prefer_default_ports).lower()}"]
        for group in self.groups:
            lines += ["", "[[groups]]", f"name = {q(group.name)}",
                      f"master_role = {q(group.master_role)}", f"flush = {q(group.flush)}",
                      f"slaves = {group.slaves}", f"commitlog_file_size = {group.commitlog_file_size}"]
            if group.conf:
                lines.append("[groups.conf]")
                lines += [f"{q(k)} = {q(v)}" for k, v in group.conf.items()]
        return "\n".join(lines) + "\n"


def _toml_string(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's (quotes, backslashes, control characters;
    a Windows path or a quoted word in a description went in raw and broke the file), but for
    DEL, which TOML wants escaped and JSON leaves."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def parse_size(value, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    else:
        match = _SIZE.fullmatch(str(value).strip())
        if not match:
            raise SpecError(f"{where}: {value!r} is not a size (write e.g. 1073741824, 64MiB or 1GiB)")
        size = int(match.group(1)) * _UNITS[(match.group(2) or "").lower()]
    if size < 4096:
        raise SpecError(f"{where}: a CommitLog file of {size} bytes is too small (at least 4096)")
    return size


def spec_from_dict(data: dict, default_name: str = "cluster") -> ClusterSpec:
    known = {"name", "namesrv", "cluster", "prefer_default_ports", "groups", "description"}
    unknown = set(data) - known
    if unknown:
        raise SpecError(f"unknown spec key(s): {', '.join(sorted(unknown))}")
    name = str(data.get("name", default_name))
    if not _NAME.fullmatch(name):
        raise SpecError(f"cluster name {name!r} may use letters, digits, '-' and '_' only")
    namesrv = data.get("namesrv", 1)
    if not isinstance(namesrv, int) or isinstance(namesrv, bool) or not 1 <= namesrv <= 5:
        raise SpecError(f"namesrv must be a count from 1 to 5, not {namesrv!r}")
    groups_data = data.get("groups") or []
    if not isinstance(groups_data, list) or not groups_data:
        raise SpecError("a cluster needs at least one broker group ([[groups]])")
    groups = []
    for index, raw in enumerate(groups_data):
        groups.append(_group(raw, f"groups[{index}]"))
    names = [g.name for g in groups]
    if len(set(names)) != len(names):
        raise SpecError("broker group names must be unique")
    return ClusterSpec(name=name, namesrv=namesrv, cluster=str(data.get("cluster", "DefaultCluster")),
                       prefer_default_ports=bool(data.get("prefer_default_ports", False)),
                       groups=groups, description=str(data.get("description", "")))


def _group(raw: dict, where: str) -> GroupSpec:
    if not isinstance(raw, dict):
        raise SpecError(f"{where} must be a table")
    known = {"name", "master_role", "flush", "slaves", "commitlog_file_size", "conf"}
    unknown = set(raw) - known
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    name = str(raw.get("name", ""))
    if not _NAME.fullmatch(name):
        raise SpecError(f"{where}: a broker group needs a name of letters, digits, '-' and '_'")
    role = str(raw.get("master_role", "ASYNC_MASTER")).upper()
    if role not in MASTER_ROLES:
        raise SpecError(f"{where}: master_role must be ASYNC_MASTER or SYNC_MASTER, not {role}")
    flush = str(raw.get("flush", "ASYNC_FLUSH")).upper()
    if flush not in FLUSH_TYPES:
        raise SpecError(f"{where}: flush must be ASYNC_FLUSH or SYNC_FLUSH, not {flush}")
    slaves = raw.get("slaves", 0)
    if not isinstance(slaves, int) or isinstance(slaves, bool) or not 0 <= slaves <= 4:
        raise SpecError(f"{where}: slaves must be a count from 0 to 4")
    if role == "SYNC_MASTER" and slaves == 0:
        raise SpecError(f"{where}: a SYNC_MASTER without a slave would answer SLAVE_NOT_AVAILABLE "
                        "to every send; give it a slave or make it ASYNC_MASTER")
    raw_conf = raw.get("conf") or {}
    if not isinstance(raw_conf, dict):
        raise SpecError(f"{where}.conf must be a table of broker settings ([groups.conf])")
    conf = {str(k): str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in raw_conf.items()}
    reserved = sorted(set(conf) & _RESERVED)
    if reserved:
        raise SpecError(f"{where}: {', '.join(reserved)} are set by the supervisor, not in conf")
    return GroupSpec(name, role, flush, slaves,
                     parse_size(raw.get("commitlog_file_size", 1 << 30), f"{where}.commitlog_file_size"),
                     conf)


def load_spec(path: str | Path) -> ClusterSpec:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"no spec file at {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path} is not valid TOML: {exc}") from None
    return spec_from_dict(data, default_name=path.stem)


def profile_names() -> list[str]:
    folder = resources.files("resources") / "profiles"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def load_profile(name: str) -> ClusterSpec:
    folder = resources.files("resources") / "profiles"
    resource = folder / f"{name}.toml"
    if not resource.is_file():
        raise SpecError(f"no built-in profile {name!r}; there are: {', '.join(profile_names())}")
    return spec_from_dict(tomllib.loads(resource.read_text(encoding="utf-8")), default_name=name)
