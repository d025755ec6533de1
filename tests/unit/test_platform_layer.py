"""The platform layer (common/platform): each platform's path run here with fakes that record
the calls, and a check that nothing outside it uses what only some platforms have."""

from __future__ import annotations

import ast
import os
import re
import signal
import socket
import subprocess
import sys
import types
from pathlib import Path

import psutil
import pytest

from common.platform import durability, file_lock, file_space, files, limits, processes, sockets

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "storage", "cluster", "export", "gui", "rocketdesk")
ONLY_SOME_PLATFORMS = {"fcntl", "msvcrt", "resource", "termios"}
POSIX_SIGNALS = {"SIGKILL", "SIGSTOP", "SIGCONT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2",
                 "SIGCHLD", "SIGPIPE", "SIGALRM"}
POSIX_OS = {"killpg", "setsid", "getpgid", "fdatasync", "posix_fallocate", "fork", "pread",
            "pwrite", "sysconf",
            # Windows has these, but they do something else there: execv ends the caller at once
            # instead of becoming the program, and kill terminates whatever the signal (even 0).
            "execv", "kill"}


# SO_REUSEADDR lets another program share a listening port on Windows (sockets.py).
FORBIDDEN_ATTRIBUTES = ({("signal", s) for s in POSIX_SIGNALS} | {("os", f) for f in POSIX_OS}
                        | {("socket", "SO_REUSEADDR")})


def _offences(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    aliases = {"os": "os", "signal": "signal", "socket": "socket"}  # a name here -> its module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ("os", "signal", "socket"):
                    aliases[alias.asname or alias.name] = alias.name
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module.split(".")[0]]
            found += [f"uses {node.module}.{alias.name}" for alias in node.names
                      if (node.module, alias.name) in FORBIDDEN_ATTRIBUTES]
        found += [f"imports {n}" for n in names if n in ONLY_SOME_PLATFORMS]
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                (aliases.get(node.value.id), node.attr) in FORBIDDEN_ATTRIBUTES:
            found.append(f"uses {aliases[node.value.id]}.{node.attr}")
        if isinstance(node, ast.keyword) and node.arg in ("start_new_session", "preexec_fn",
                                                          "reuse_address", "reuse_port"):
            found.append(f"passes {node.arg}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and aliases.get(node.func.value.id) == "os"
                and node.func.attr == "open" and len(node.args) > 1
                and "BINARY" not in {getattr(n, "id", getattr(n, "attr", None))
                                     for n in ast.walk(node.args[1])}):
            found.append("opens a descriptor without BINARY")  # (text mode on Windows)
    return [f"{path.relative_to(root)}:{o}" for o in found]


def test_nothing_outside_the_platform_layer_uses_what_only_some_platforms_have():
    offences = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "platform" in path.relative_to(ROOT).parts[:2]:
                continue
            offences += _offences(path)
    assert offences == []


def test_the_check_would_see_them(tmp_path):
    sample = tmp_path / "x.py"
    sample.write_text("import fcntl\nimport os, signal\nos.killpg(1, signal.SIGKILL)\n"
                      "subprocess.Popen([], start_new_session=True)\n"
                      "from os import fdatasync\nimport signal as sig\nsig.SIGSTOP\n"
                      "import socket\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                      "loop.create_server(f, reuse_address=True)\n"
                      "os.open(p, os.O_RDWR)\nos.open(p, os.O_RDWR | files.BINARY)\n")
    assert sorted(o.split(":", 1)[1] for o in _offences(sample, tmp_path)) == sorted([
        "imports fcntl", "uses os.killpg", "uses signal.SIGKILL", "passes start_new_session",
        "uses os.fdatasync", "uses signal.SIGSTOP", "uses socket.SO_REUSEADDR",
        "passes reuse_address", "opens a descriptor without BINARY"])


# -- durability -------------------------------------------------------------------------------------
def test_data_is_synced_with_fdatasync_where_there_is_one(monkeypatch):
    calls = []
    monkeypatch.setattr(os, "fdatasync", lambda fd: calls.append(("fdatasync", fd)), raising=False)
    durability.sync_data(7)
    assert calls == [("fdatasync", 7)]


def test_macos_reaches_the_platter_with_full_fsync_and_falls_back_to_fsync(monkeypatch):
    calls = []
    fake_fcntl = types.SimpleNamespace(F_FULLFSYNC=51, fcntl=lambda fd, op: calls.append(("fcntl", fd, op)))
    monkeypatch.delattr(os, "fdatasync", raising=False)
    monkeypatch.setattr(durability, "fcntl", fake_fcntl)
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(("fsync", fd)))
    durability.sync_data(3)
    assert calls == [("fcntl", 3, 51)]

    def refuse(fd, op):
        raise OSError(45, "not supported")  # a file system that cannot

    fake_fcntl.fcntl = refuse
    durability.sync_data(3)
    assert calls[-1] == ("fsync", 3)


def test_mapped_writes_are_flushed_from_the_mapping_first_on_windows(
        monkeypatch, tmp_path):
    import mmap

    calls = []
    monkeypatch.setattr(durability, "sync_data", lambda fd: calls.append(("sync", fd)))

    class Mapping:  # mmap.mmap's flush, recorded
        def __len__(self):
            return 1 << 20

        def flush(self, offset, size):
            calls.append(("flush", offset, size))

    for platform in ("linux", "darwin"):  # one page cache: the file sync is enough
        monkeypatch.setattr(sys, "platform", platform)
        durability.sync_mapped(Mapping(), 5, 70_000, 80_000)
        assert calls == [("sync", 5)]
        calls.clear()
    monkeypatch.setattr(sys, "platform", "win32")
    durability.sync_mapped(Mapping(), 5, 70_000, 80_000)
    begin = 70_000 - 70_000 % mmap.ALLOCATIONGRANULARITY
    assert calls == [("flush", begin, 80_000 - begin), ("sync", 5)]
    calls.clear()
    # A real mapping takes that offset.
    path = tmp_path / "f"
    path.write_bytes(bytes(1 << 20))
    with open(path, "r+b") as handle, mmap.mmap(handle.fileno(), 1 << 20) as mm:
        mm[70_000:70_010] = b"x" * 10
        durability.sync_mapped(mm, handle.fileno(), 70_000, 80_000)
    assert path.read_bytes()[70_000:70_010] == b"x" * 10


def test_windows_syncs_with_fsync_and_leaves_directories_alone(monkeypatch):
    calls = []
    monkeypatch.delattr(os, "fdatasync", raising=False)
    monkeypatch.setattr(durability, "fcntl", None)
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(("fsync", fd)))
    durability.sync_data(4)
    assert calls == [("fsync", 4)]
    monkeypatch.setattr(durability.os, "name", "nt")
    monkeypatch.setattr(os, "open", lambda *a: pytest.fail("a directory opened on Windows"))
    durability.sync_directory("C:/store")


def test_blocks_are_claimed_only_where_the_platform_can(monkeypatch, tmp_path):
    with open(tmp_path / "f", "wb") as handle:
        assert file_space.preallocate(handle.fileno(), 0, 4096) is True
        assert os.fstat(handle.fileno()).st_size == 4096
        monkeypatch.delattr(os, "posix_fallocate")
        assert file_space.preallocate(handle.fileno(), 4096, 4096) is False  # macOS, Windows


# -- the lock file ----------------------------------------------------------------------------------
def test_the_lock_is_held_against_a_second_taker(tmp_path):
    path = tmp_path / "lock"
    first = os.open(path, os.O_RDWR | os.O_CREAT)
    second = os.open(path, os.O_RDWR)
    try:
        file_lock.try_lock(first)
        with pytest.raises(OSError, match=r"Resource temporarily unavailable|would block"):
            file_lock.try_lock(second)
    finally:
        os.close(first)
        os.close(second)


def test_windows_locks_the_first_byte_with_msvcrt(monkeypatch):
    calls = []
    fake = types.SimpleNamespace(LK_NBLCK=2, locking=lambda fd, mode, n: calls.append((fd, mode, n)))
    monkeypatch.setattr(file_lock, "fcntl", None)
    monkeypatch.setitem(sys.modules, "msvcrt", fake)
    file_lock.try_lock(9)
    assert calls == [(9, 2, 1)]
    # A lock a killed broker held a moment ago: asked again until Windows lets go of it.
    refusals = [OSError(36, "locked"), OSError(36, "locked")]

    def locking(fd, mode, n):
        calls.append((fd, mode, n))
        if refusals:
            raise refusals.pop()

    fake.locking = locking
    calls.clear()
    file_lock.try_lock(9)
    assert len(calls) == 3
    monkeypatch.setattr(file_lock, "WINDOWS_RELEASE_WAIT", 0.0)  # held for good: refused
    refusals[:] = [OSError(36, "locked")] * 100
    with pytest.raises(OSError, match="locked"):
        file_lock.try_lock(9)


# -- processes and limits --------------------------------------------------------------------------
class Recorder:
    def __init__(self) -> None:
        self.calls: list = []

    def __getattr__(self, name):
        return lambda *args: self.calls.append((name, *args))


def test_process_actions_on_posix_and_windows(monkeypatch):
    process = Recorder()
    processes.stop(process)
    processes.kill(process)
    processes.pause(process)
    processes.resume(process)
    assert process.calls == [("resume",), ("terminate",), ("kill",), ("suspend",), ("resume",)]
    assert processes.detached() == {"start_new_session": True}
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0x200, raising=False)
    monkeypatch.setattr(subprocess, "CREATE_NO_WINDOW", 0x8000000, raising=False)
    monkeypatch.setattr(processes, "STOP_BY_REQUEST", True)  # (as on Windows)
    asked = []
    monkeypatch.setattr(processes.stop_requests, "ask", asked.append)
    windows = Recorder()
    processes.stop(windows)
    # No signal reaches a process without a console there: resumed, then asked by a file.
    assert windows.calls == [("resume",)]
    assert asked == [windows]  # the process held, not whatever has its pid by now
    assert processes.detached() == {"creationflags": 0x8000200}


def test_a_group_is_killed_by_its_session_on_posix_and_through_the_held_process_on_windows(
        monkeypatch):
    killed = []
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(os, "killpg", lambda pid, sig: killed.append(("killpg", pid, sig)),
                        raising=False)
    processes.kill_group(77)
    assert killed == [("killpg", 77, getattr(signal, "SIGKILL", 9))]
    monkeypatch.setattr(sys, "platform", "win32")
    killed.clear()
    processes.kill_group(77)  # no held process: a bare pid may be another program's by now
    assert killed == []

    class Member:  # what psutil.process_iter lists
        def __init__(self, pid, ppid, created):
            self.pid, self.info = pid, {"ppid": ppid, "create_time": created}

        def kill(self):
            killed.append(self.pid)

    class Held(Member):  # the psutil.Process kept since the start: it has ended
        def create_time(self):
            return self.info["create_time"]

        def is_running(self):
            return False

    listed = [Member(78, 77, 101.0), Member(79, 78, 102.0),  # its JVM and the JVM's worker
              Member(80, 77, 50.0),  # older than the job: the pid's earlier owner's child
              Member(81, 1, 103.0)]  # somebody else's
    monkeypatch.setattr(processes.psutil, "process_iter", lambda attrs: listed)
    processes.kill_group(77, Held(77, 1, 100.0))
    assert killed == [78, 79]  # found though the job ended (Windows leaves them orphans)


def test_a_process_s_descendants_are_found_with_psutil_s_own_listing():
    # Real processes (the orphans of an ended one are Windows' case, faked above: Linux gives
    # them to init): a job that started a worker.
    script = ("import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
              "'import time; time.sleep(60)']); print('started', flush=True); sys.stdin.read()")
    with subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as job:
        held = psutil.Process(job.pid)
        assert job.stdout.readline().strip() == "started"
        found = processes._descendants(held)
        try:
            assert [p.cmdline()[-1] for p in found] == ["import time; time.sleep(60)"]
        finally:
            for process in found:
                process.kill()
            job.stdin.close()


def test_a_listening_port_is_taken_again_on_posix_and_never_shared_on_windows(monkeypatch):
    posix = Recorder()
    sockets.listen_again_soon(posix)
    assert posix.calls == [("setsockopt", socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)]
    monkeypatch.setattr(sys, "platform", "win32")
    windows = Recorder()
    sockets.listen_again_soon(windows)
    assert windows.calls == []  # SO_REUSEADDR there would share a port someone listens on
    # And the check the supervisor makes before it gives a node a port, here: a port someone
    # listens on is not free, one whose listener just closed is.
    from cluster.supervisor.ports import port_is_free

    monkeypatch.undo()
    with socket.socket() as listener:
        sockets.listen_again_soon(listener)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not port_is_free(port)
    assert port_is_free(port)
    # macOS binds 127.0.0.1:port beside a program listening on every address at that port (a
    # bind that succeeds though somebody listens, faked here): the answer tells it is taken.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        monkeypatch.setattr(socket.socket, "bind", lambda self, address: None)
        monkeypatch.setattr(sys, "platform", "darwin")
        assert not port_is_free(port)


def test_a_program_takes_over_by_exec_on_posix_and_is_waited_for_on_windows(monkeypatch):
    calls = []
    monkeypatch.setattr(os, "execv", lambda path, argv: calls.append(("execv", path, argv)))
    monkeypatch.setattr(subprocess, "call", lambda argv: calls.append(("call", argv)) or 3)
    handlers = {}
    monkeypatch.setattr(signal, "signal", handlers.__setitem__)
    processes.become(["/py", "-m", "gui"])
    assert calls[0] == ("execv", "/py", ["/py", "-m", "gui"])
    monkeypatch.setattr(sys, "platform", "win32")
    calls.clear()
    assert processes.become(["py.exe", "-m", "gui"]) == 3  # its exit code is the command's
    assert calls == [("call", ["py.exe", "-m", "gui"])]
    assert handlers == {signal.SIGINT: signal.SIG_IGN}  # Ctrl-C is the console's to handle


def test_a_node_raises_its_open_files_limit_as_far_as_it_may(monkeypatch):
    asked = []
    fake = types.SimpleNamespace(RLIMIT_NOFILE=7, RLIM_INFINITY=-1, getrlimit=lambda r: limit[0],
                                 setrlimit=lambda r, pair: asked.append(pair) or limit.__setitem__(0, pair))
    monkeypatch.setitem(sys.modules, "resource", fake)
    monkeypatch.setattr(sys, "platform", "darwin")
    limit = [(256, -1)]  # macOS: 256, hard unlimited
    assert limits.raise_open_files_limit() == 10240
    assert asked == [(10240, -1)]
    limit[0], asked[:] = (1024, 4096), []  # a hard limit below what is wanted
    assert limits.raise_open_files_limit() == 4096
    limit[0], asked[:] = (65536, 65536), []  # already more: never lowered
    assert limits.raise_open_files_limit() == 65536
    assert asked == []
    monkeypatch.setattr(sys, "platform", "linux")  # Linux: all the hard limit allows
    limit[0], asked[:] = (1024, 524288), []
    assert limits.raise_open_files_limit() == 524288
    assert asked == [(524288, 524288)]
    limit[0], asked[:] = (1024, -1), []  # (an unlimited hard limit: a million)
    assert limits.raise_open_files_limit() == 1 << 20
    monkeypatch.setitem(sys.modules, "resource", None)  # Windows
    assert limits.raise_open_files_limit() is None


def test_the_open_files_limit_is_asked_where_there_is_one(monkeypatch):
    assert limits.open_files_limit() is None or limits.open_files_limit() > 0
    monkeypatch.setitem(sys.modules, "resource", None)  # Windows: no such module
    assert limits.open_files_limit() is None


def test_a_stop_request_reaches_the_event_loop_on_posix_and_windows(monkeypatch):
    loop = Recorder()
    processes.on_stop_request(loop, "stop")
    # Signals, and a look for a request file a little later (on every platform).
    assert loop.calls[:2] == [("add_signal_handler", signal.SIGTERM, "stop"),
                              ("add_signal_handler", signal.SIGINT, "stop")]
    assert [c[:2] for c in loop.calls[2:]] == [("call_later", processes.stop_requests.POLL_SECONDS)]
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(signal, "SIGBREAK", 21, raising=False)
    handlers = {}
    monkeypatch.setattr(signal, "signal", handlers.__setitem__)
    windows = Recorder()
    processes.on_stop_request(windows, "stop")
    assert sorted(handlers) == sorted([21, signal.SIGINT])  # no loop signal handlers there
    assert [c[0] for c in windows.calls] == ["call_later"]  # the request file's first look
    handlers[21](21, None)  # CTRL_BREAK_EVENT arrives on another thread
    assert windows.calls[1:] == [("call_soon_threadsafe", "stop")]


def test_dev_py_keeps_the_same_install_stamp_as_dev_sh():
    import importlib.util

    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    # dev.sh's own line, run as it runs it: its list of files, not dev.py's.
    line = next(x.strip() for x in (ROOT / "dev.sh").read_text().splitlines()
                if x.strip().startswith("want=$("))
    shell = subprocess.run(["bash", "-c", f"{line}; echo $want"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()[0]
    assert dev.install_stamp() == shell  # dev.sh and dev.py never reinstall for each other
    assert dev.venv_tool("python") == ROOT / ".venv" / "bin" / "python"
    # Every file setup.py builds the compiled core from: an edit to any one rebuilds it.
    built = set(re.findall(r'"(common/[\w.]+\.[ch])"', (ROOT / "setup.py").read_text()))
    stamped = {path.relative_to(ROOT).as_posix() for path in dev.stamped_files()}
    assert len(built) > 10
    assert built <= stamped, built - stamped


def test_a_file_in_use_elsewhere_is_deleted_later_and_replaced_after_a_retry(monkeypatch, tmp_path):
    from common.platform import files
    from storage.mapped_file import MappedFile

    mapped = MappedFile(str(tmp_path / "00000000000000000000"), 4096)
    real_remove = os.remove

    def in_use(path):  # Windows, while another process reads the file
        raise files_in_use(path)

    mapped.mm[:5] = b"stale"
    monkeypatch.setattr(os, "remove", in_use)
    assert mapped.destroy() is True  # out of the store: unmapped, and emptied
    assert mapped.left_behind
    assert (tmp_path / "00000000000000000000").stat().st_size == 0  # not a byte to read back
    assert mapped.destroy() is True  # refused again: still owed
    assert mapped.left_behind
    monkeypatch.setattr(os, "remove", real_remove)
    assert mapped.destroy() is True
    assert not mapped.left_behind
    assert not (tmp_path / "00000000000000000000").exists()

    (tmp_path / "new").write_text("new")
    (tmp_path / "record").write_text("old")
    real_replace, refusals = os.replace, []

    def busy_twice(source, target):  # a sharing violation, then "access denied" (a reader)
        if len(refusals) < 2:
            refusals.append(target)
            raise files_in_use(target, 32 if not refusals[1:] else 5)
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", busy_twice)
    files.replace_file(str(tmp_path / "new"), str(tmp_path / "record"), pause=0)
    assert (tmp_path / "record").read_text() == "new"
    assert len(refusals) == 2

    # Read while another process replaces it: refused a moment, then read.
    real_open, reads = open, []

    def busy_once(path, *args, **kwargs):
        reads.append(path)
        if len(reads) == 1:
            raise files_in_use(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(files, "open", busy_once, raising=False)
    assert files.read_text(tmp_path / "record", pause=0) == "new"
    assert len(reads) == 2


def files_in_use(path: str, winerror: int = 32) -> PermissionError:
    exc = PermissionError(13, "in use", path)
    exc.winerror = winerror  # (Windows' sharing violation; 5: access denied, for a mapped file)
    return exc


def test_a_permission_really_missing_still_raises(monkeypatch, tmp_path):
    from common.platform import files

    def denied(path):
        raise PermissionError(13, "denied", path)  # EACCES on Linux: an error, not "later"

    monkeypatch.setattr(os, "remove", denied)
    with pytest.raises(PermissionError):
        files.remove_file(str(tmp_path / "x"))


def test_positioned_reads_and_writes_without_pread_and_pwrite(monkeypatch, tmp_path):
    from common.platform import file_io

    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, b"0123456789")
        monkeypatch.delattr(os, "pread")
        monkeypatch.delattr(os, "pwrite")  # Windows' Python
        assert file_io.pwrite(fd, b"ab", 3) == 2
        assert file_io.pread(fd, 4, 2) == b"2ab5"
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"012ab56789"


def test_an_open_file_s_time_is_set_through_its_descriptor(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x")
    os.utime(path, (1_000, 2_000))
    fd = os.open(path, os.O_RDWR)
    try:
        files.set_modified_time(fd, 1_700_000_000.25)
    finally:
        os.close(fd)
    # To the millisecond where the file system keeps it (some keep whole seconds, or two).
    assert os.stat(path).st_mtime == pytest.approx(1_700_000_000.25, abs=2)
    if sys.platform != "win32":  # (Windows may move it on open)
        assert os.stat(path).st_atime == pytest.approx(1_000, abs=2)  # kept


def test_windows_sets_an_open_file_s_time_on_its_handle(monkeypatch):
    # Windows' os.utime opens the file again by name, sharing nothing: a file this process has
    # mapped refuses it. SetFileTime on the handle already open does not.
    import ctypes
    import types

    calls = []

    class Kernel32:
        ok = 1

        def SetFileTime(self, handle, created, accessed, written):  # (Windows' name)
            calls.append((handle.value, created, accessed, written._obj.dwHighDateTime << 32
                          | written._obj.dwLowDateTime))
            return self.ok

    kernel32 = Kernel32()
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setitem(sys.modules, "msvcrt", types.SimpleNamespace(get_osfhandle=lambda fd: fd + 1000))
    monkeypatch.setattr(files, "_kernel32", lambda: kernel32)
    files.set_modified_time(7, 1_700_000_000.5)
    # 100-ns ticks since 1601: 11,644,473,600 s before 1970.
    assert calls == [(1007, None, None, (1_700_000_000_5 + 11_644_473_600_0) * 1_000_000)]
    kernel32.ok = 0
    monkeypatch.setattr(ctypes, "get_last_error", lambda: 32, raising=False)
    monkeypatch.setattr(ctypes, "WinError", lambda code: OSError(code, "in use"), raising=False)
    with pytest.raises(OSError, match="in use"):
        files.set_modified_time(7, 1.0)
