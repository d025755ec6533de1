/*
 * The CommitLog's write into the page cache, shared by write_at (common/_storecore.c) and the
 * one-step put (common/_append.c). Header-only; POSIX (Windows appends through the mapping).
 */
#ifndef ROCKETDESK_FILE_WRITE_H
#define ROCKETDESK_FILE_WRITE_H

#ifndef _WIN32
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <unistd.h>

/* A write this long lets other threads run during its pwrite; a put's usual write into the page
 * cache takes a microsecond or two, and letting go of the interpreter lock for it would hand
 * the lock to dispatch and back on every put. */
#define WRITE_AT_UNLOCKED (8 * 1024)

/* pwrite all of data[0:n] at offset, repeated until all is written; 0, or -1 with errno set. */
static inline int
pwrite_fully(int fd, const char *data, Py_ssize_t n, long long offset)
{
    while (n > 0) {
        ssize_t done;
        if (n >= WRITE_AT_UNLOCKED) {
            Py_BEGIN_ALLOW_THREADS
            done = pwrite(fd, data, (size_t)n, (off_t)offset);
            Py_END_ALLOW_THREADS
        }
        else {
            done = pwrite(fd, data, (size_t)n, (off_t)offset);
        }
        if (done <= 0) {
            if (done < 0 && errno == EINTR)
                continue;
            if (done == 0)
                errno = EIO; /* no progress on a regular file: never loop on it */
            return -1;
        }
        data += done;
        n -= done;
        offset += done;
    }
    return 0;
}
#endif

#endif
