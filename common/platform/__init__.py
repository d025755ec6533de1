"""What differs by platform, in one place: each module here has the Linux, macOS and Windows
way of one concern, chosen when called (so a test can take away what a platform lacks):

* durability.py: data on the disk (fdatasync; F_FULLFSYNC on macOS; fsync on Windows);
* file_space.py: claiming a file's blocks ahead of writing (posix_fallocate where there is one);
* file_io.py: reading and writing at a position (pread/pwrite, or a locked seek on Windows);
* file_lock.py: a store's lock file (fcntl on POSIX, msvcrt on Windows);
* files.py: deleting and replacing files another process has open (Windows refuses both),
  setting an open file's time;
* limits.py: the open-files limit (RLIMIT_NOFILE where there is one);
* allocator.py: glibc's malloc keeping big freed buffers for reuse (mallopt; nothing
  elsewhere, where the allocators cache them themselves);
* sockets.py: listening on a port again soon (SO_REUSEADDR on POSIX; nothing on Windows,
  where that option lets others share the port);
* processes.py: kill, pause, resume and detach processes (psutil; signals only on POSIX), and
  a process's own stop requests (SIGTERM on POSIX; a request file everywhere);
* stop_requests.py: that request file, the only stop request that reaches a process without
  a console on Windows.

Nothing outside this package imports fcntl, msvcrt, resource or termios, uses POSIX-only
signals or SO_REUSEADDR (tests/unit/test_platform_layer.py holds the code to that)."""
