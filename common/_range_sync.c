/*
 * common._storecore.RangeSyncer: a native thread that makes ranges of mapped files durable
 * (msync MS_SYNC) and tells an event loop through an eventfd, never taking the interpreter lock.
 *
 * Why: SYNC_FLUSH's group commit ran on a Python thread (storage/flush.py GroupCommitService).
 * Every round it took the interpreter lock to wake up, to pick the requests, around the msync
 * and to hand the completions to the loop; on two busy cores the loop held the lock, and about
 * a third of a round was that thread waiting for it and handing it back (docs/benchmarks.md,
 * session 18: `strace` of the flush thread). Here the event loop decides a round (which
 * requests, which file ranges: storage/loop_group_commit.py), this thread only waits in msync,
 * and the loop hears of the end by reading the eventfd like any other socket.
 *
 * One round at a time: sync() hands over up to MAX_SPANS ranges and returns; the thread syncs
 * them in order and stops at the first failure; result() (after the eventfd is readable) takes
 * the outcome, 0 or the errno, and `synced` says how many ranges before a failure made it. A range is turned into addresses when it is handed over and the
 * buffer released at once (the way common/_populator.c does), so a mapping can be closed at any
 * time; the caller holds the mapped file for the round (MappedFile.hold), and should it be
 * unmapped anyway msync answers ENOMEM, which is a failed flush, never a byte changed.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include "_populator.h"
#include "_range_sync.h"

#ifdef __linux__
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_SPANS 8

typedef struct {
    uintptr_t from, to;
    int index;              /* its place among the ranges given (empty ones are not synced) */
} sync_span;
#endif

enum { IDLE = 0, ASKED = 1, SYNCING = 2, DONE = 3 };

typedef struct {
    PyObject_HEAD
#ifdef __linux__
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int event_fd;           /* readable when a round ends; -1 once closed */
    int running;            /* the thread was started and not yet joined */
    int stopping;
    int abandoned;          /* left to a hung msync: never joined, never freed */
    int state;              /* IDLE -> ASKED (sync) -> SYNCING (thread) -> DONE -> IDLE (result) */
    int result;             /* errno of the round's first failure, or 0 */
    int given;              /* ranges given to the round, empty ones included */
    int synced;             /* of those, how many in order were made durable */
    int span_count;
    sync_span spans[MAX_SPANS];
    unsigned long long rounds;
    unsigned long long sync_ns; /* time spent in msync, all rounds */
#endif
} RangeSyncer;

#ifdef __linux__
static void *
worker(void *arg)
{
    RangeSyncer *self = (RangeSyncer *)arg;
    pthread_mutex_lock(&self->mutex);
    for (;;) {
        while (!self->stopping && self->state != ASKED)
            pthread_cond_wait(&self->cond, &self->mutex);
        if (self->stopping)
            break;
        self->state = SYNCING;
        int count = self->span_count;
        sync_span spans[MAX_SPANS];
        memcpy(spans, self->spans, sizeof(sync_span) * (size_t)count);
        pthread_mutex_unlock(&self->mutex);
        struct timespec began, ended;
        clock_gettime(CLOCK_MONOTONIC, &began);
        int rc = 0, failed_at = -1;
        for (int i = 0; i < count && rc == 0; i++) {
            rc = msync((void *)spans[i].from, (size_t)(spans[i].to - spans[i].from), MS_SYNC) == 0
                     ? 0 : errno;
            if (rc != 0)
                failed_at = spans[i].index;
        }
        clock_gettime(CLOCK_MONOTONIC, &ended);
        pthread_mutex_lock(&self->mutex);
        self->synced = failed_at < 0 ? self->given : failed_at;
        self->sync_ns += (unsigned long long)((ended.tv_sec - began.tv_sec) * 1000000000LL
                                              + (ended.tv_nsec - began.tv_nsec));
        self->result = rc;
        self->state = DONE;
        self->rounds++;
        pthread_cond_broadcast(&self->cond); /* a wait() for the round */
        uint64_t one = 1;
        /* The loop reads the count back (result); a full counter (never, at 2^64-2) or a closed
         * descriptor leaves the round for wait() or the next result() to see. */
        ssize_t written = write(self->event_fd, &one, sizeof one);
        (void)written;
    }
    pthread_mutex_unlock(&self->mutex);
    return NULL;
}

static void
stop_worker(RangeSyncer *self)
{
    /* Under the interpreter lock: a second stop finds running == 0 and joins nothing; an
     * abandoned thread is never joined (it may never come back from msync). */
    if (!self->running || self->abandoned)
        return;
    pthread_t thread = self->thread;
    pthread_mutex_lock(&self->mutex);
    self->running = 0; /* (read by wait() under the mutex, without the interpreter lock) */
    self->stopping = 1;
    pthread_cond_broadcast(&self->cond);
    pthread_mutex_unlock(&self->mutex);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(thread, NULL); /* after the msync in progress, if any */
    Py_END_ALLOW_THREADS
}
#endif

static PyObject *
syncer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, ":RangeSyncer", keywords))
        return NULL;
#ifdef __linux__
    RangeSyncer *self = (RangeSyncer *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->event_fd = -1;
    pthread_mutex_init(&self->mutex, NULL);
    /* wait()'s deadline on the monotonic clock: a wall-clock step must not stretch or cut a
     * shutdown's wait for the round in flight. */
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&self->cond, &attr);
    pthread_condattr_destroy(&attr);
    self->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->event_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(self);
        return NULL;
    }
    int rc = pthread_create(&self->thread, NULL, worker, self);
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(self);
        return NULL;
    }
    pthread_mutex_lock(&self->mutex);
    self->running = 1;
    pthread_mutex_unlock(&self->mutex);
    return (PyObject *)self;
#else
    (void)type;
    PyErr_SetString(PyExc_NotImplementedError, "RangeSyncer runs on Linux only");
    return NULL;
#endif
}

static void
syncer_dealloc(RangeSyncer *self)
{
#ifdef __linux__
    stop_worker(self);
    if (self->event_fd >= 0)
        close(self->event_fd);
    pthread_cond_destroy(&self->cond);
    pthread_mutex_destroy(&self->mutex);
#endif
    Py_TYPE(self)->tp_free((PyObject *)self);
}

#ifdef __linux__
static PyObject *
syncer_sync(RangeSyncer *self, PyObject *spans)
{
    PyObject *seq = PySequence_Fast(spans, "sync() takes a sequence of (mm, start, end)");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > MAX_SPANS) {
        Py_DECREF(seq);
        return PyErr_Format(PyExc_ValueError, "sync() takes 1 to %d ranges, not %zd", MAX_SPANS, n);
    }
    sync_span found[MAX_SPANS];
    int count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "each range is a tuple (mm, start, end)");
            return NULL;
        }
        uintptr_t from, to;
        int empty = mapped_pages(&PyTuple_GET_ITEM(item, 0), &from, &to);
        if (empty < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        if (empty == 0) {
            found[count].from = from;
            found[count].to = to;
            found[count].index = (int)i;
            count++;
        }
    }
    Py_DECREF(seq);
    pthread_mutex_lock(&self->mutex);
    if (!self->running || self->stopping || self->state != IDLE) {
        int state = self->state;
        pthread_mutex_unlock(&self->mutex);
        PyErr_SetString(PyExc_RuntimeError, state != IDLE ? "a round is in progress"
                                                          : "the syncer is stopped");
        return NULL;
    }
    memcpy(self->spans, found, sizeof(sync_span) * (size_t)count);
    self->span_count = count;
    self->given = (int)n;
    self->synced = 0;
    self->result = 0;
    self->state = ASKED;
    pthread_cond_broadcast(&self->cond);
    pthread_mutex_unlock(&self->mutex);
    Py_RETURN_NONE;
}
#endif

PyDoc_STRVAR(sync_doc,
"sync(ranges)\n\n"
"Start a round: make each (mm, start, end) of ranges durable in order (msync MS_SYNC over the\n"
"pages of mm[start:end]), on the native thread. Returns at once; the eventfd (fileno) becomes\n"
"readable when the round ends. RuntimeError while a round is in progress or once stopped.\n"
"The caller keeps the mappings open for the round.");

static PyObject *
syncer_sync_method(RangeSyncer *self, PyObject *spans)
{
#ifdef __linux__
    return syncer_sync(self, spans);
#else
    (void)self;
    (void)spans;
    PyErr_SetString(PyExc_NotImplementedError, "RangeSyncer runs on Linux only");
    return NULL;
#endif
}

PyDoc_STRVAR(result_doc,
"result() -> int | None\n\n"
"The round's outcome once it ended (0, or the errno of the first range that failed), taking it:\n"
"the syncer is then free for the next round and the eventfd is read empty; ``synced`` then says\n"
"how many of its ranges, in order, were made durable. None while a round is in progress or\n"
"none was started.");

static PyObject *
syncer_result(RangeSyncer *self, PyObject *unused)
{
    (void)unused;
#ifdef __linux__
    uint64_t count;
    if (self->event_fd >= 0) {
        ssize_t got = read(self->event_fd, &count, sizeof count); /* EAGAIN: nothing signalled */
        (void)got;
    }
    pthread_mutex_lock(&self->mutex);
    if (self->state != DONE) {
        pthread_mutex_unlock(&self->mutex);
        Py_RETURN_NONE;
    }
    int rc = self->result;
    self->state = IDLE;
    pthread_mutex_unlock(&self->mutex);
    return PyLong_FromLong(rc);
#else
    (void)self;
    Py_RETURN_NONE;
#endif
}

PyDoc_STRVAR(wait_doc,
"wait(timeout) -> bool\n\n"
"Block (without the interpreter lock) until no round is in progress, or timeout seconds pass;\n"
"True when none is. The outcome is left for result().");

static PyObject *
syncer_wait(RangeSyncer *self, PyObject *arg)
{
    double timeout = PyFloat_AsDouble(arg);
    if (timeout == -1.0 && PyErr_Occurred())
        return NULL;
    if (isnan(timeout))
        timeout = 0;
    else if (timeout > 1e9) /* (inf included: ~31 years, and no overflow of the deadline) */
        timeout = 1e9;
#ifdef __linux__
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    if (timeout > 0) {
        double whole = (double)(long long)timeout;
        deadline.tv_sec += (time_t)whole;
        deadline.tv_nsec += (long)((timeout - whole) * 1e9);
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec += 1;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    int busy;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mutex);
    while ((self->state == ASKED || self->state == SYNCING) && self->running && timeout > 0) {
        if (pthread_cond_timedwait(&self->cond, &self->mutex, &deadline) == ETIMEDOUT)
            break;
    }
    busy = self->state == ASKED || self->state == SYNCING;
    pthread_mutex_unlock(&self->mutex);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(!busy);
#else
    (void)self;
    Py_RETURN_TRUE;
#endif
}

static PyObject *
syncer_fileno(RangeSyncer *self, PyObject *unused)
{
    (void)unused;
#ifdef __linux__
    if (self->event_fd < 0) {
        PyErr_SetString(PyExc_ValueError, "the syncer is closed");
        return NULL;
    }
    return PyLong_FromLong(self->event_fd);
#else
    (void)self;
    PyErr_SetString(PyExc_NotImplementedError, "RangeSyncer runs on Linux only");
    return NULL;
#endif
}

static PyObject *
syncer_stop(RangeSyncer *self, PyObject *unused)
{
    (void)unused;
#ifdef __linux__
    stop_worker(self);
#endif
    Py_RETURN_NONE;
}

static PyObject *
syncer_abandon(RangeSyncer *self, PyObject *unused)
{
    (void)unused;
#ifdef __linux__
    /* The thread may stay in msync for as long as the disk hangs, and it uses this object: so
     * the object is never freed (one reference kept for good), and nothing, not even the
     * interpreter's exit, waits for the thread. */
    if (!self->abandoned) {
        self->abandoned = 1;
        Py_INCREF(self);
    }
#endif
    Py_RETURN_NONE;
}

static PyObject *
syncer_get_abandoned(RangeSyncer *self, void *closure)
{
    (void)closure;
#ifdef __linux__
    return PyBool_FromLong(self->abandoned);
#else
    (void)self;
    Py_RETURN_FALSE;
#endif
}

static PyObject *
syncer_get_rounds(RangeSyncer *self, void *closure)
{
    (void)closure;
#ifdef __linux__
    pthread_mutex_lock(&self->mutex);
    unsigned long long rounds = self->rounds;
    pthread_mutex_unlock(&self->mutex);
    return PyLong_FromUnsignedLongLong(rounds);
#else
    (void)self;
    return PyLong_FromLong(0);
#endif
}

static PyObject *
syncer_get_sync_seconds(RangeSyncer *self, void *closure)
{
    (void)closure;
#ifdef __linux__
    pthread_mutex_lock(&self->mutex);
    unsigned long long ns = self->sync_ns;
    pthread_mutex_unlock(&self->mutex);
    return PyFloat_FromDouble((double)ns / 1e9);
#else
    (void)self;
    return PyFloat_FromDouble(0.0);
#endif
}

static PyObject *
syncer_get_synced(RangeSyncer *self, void *closure)
{
    (void)closure;
#ifdef __linux__
    pthread_mutex_lock(&self->mutex);
    int synced = self->synced;
    pthread_mutex_unlock(&self->mutex);
    return PyLong_FromLong(synced);
#else
    (void)self;
    return PyLong_FromLong(0);
#endif
}

static PyObject *
syncer_get_busy(RangeSyncer *self, void *closure)
{
    (void)closure;
#ifdef __linux__
    pthread_mutex_lock(&self->mutex);
    int busy = self->state == ASKED || self->state == SYNCING;
    pthread_mutex_unlock(&self->mutex);
    return PyBool_FromLong(busy);
#else
    (void)self;
    Py_RETURN_FALSE;
#endif
}

static PyObject *
syncer_get_running(RangeSyncer *self, void *closure)
{
    (void)closure;
#ifdef __linux__
    pthread_mutex_lock(&self->mutex);
    int running = self->running;
    pthread_mutex_unlock(&self->mutex);
    return PyBool_FromLong(running);
#else
    (void)self;
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef syncer_methods[] = {
    {"sync", (PyCFunction)syncer_sync_method, METH_O, sync_doc},
    {"result", (PyCFunction)syncer_result, METH_NOARGS, result_doc},
    {"wait", (PyCFunction)syncer_wait, METH_O, wait_doc},
    {"fileno", (PyCFunction)syncer_fileno, METH_NOARGS,
     "fileno() -> int\n\nThe eventfd that becomes readable when a round ends."},
    {"stop", (PyCFunction)syncer_stop, METH_NOARGS,
     "stop()\n\nStop the thread (after the msync in progress) and wait for it; again is "
     "harmless. A round it did not end stays in progress for good."},
    {"abandon", (PyCFunction)syncer_abandon, METH_NOARGS,
     "abandon()\n\nLeave the thread to a round that does not end (a hung disk): the syncer is "
     "then never stopped, joined or freed, so no exit waits for it."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef syncer_getset[] = {
    {"rounds", (getter)syncer_get_rounds, NULL, "rounds ended so far", NULL},
    {"sync_seconds", (getter)syncer_get_sync_seconds, NULL,
     "time spent in msync so far, all rounds", NULL},
    {"synced", (getter)syncer_get_synced, NULL,
     "ranges of the last ended round made durable, in order (all of them when it succeeded)",
     NULL},
    {"busy", (getter)syncer_get_busy, NULL, "a round is in progress", NULL},
    {"running", (getter)syncer_get_running, NULL, "the thread runs (not stopped)", NULL},
    {"abandoned", (getter)syncer_get_abandoned, NULL, "abandon() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RangeSyncerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "common._storecore.RangeSyncer",
    .tp_basicsize = sizeof(RangeSyncer),
    .tp_dealloc = (destructor)syncer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "RangeSyncer()\n\nA native thread that msyncs ranges of mapped files one round "
              "at a time and signals an eventfd, without the interpreter lock (Linux).",
    .tp_methods = syncer_methods,
    .tp_getset = syncer_getset,
    .tp_new = syncer_new,
};

int
range_syncer_add_type(PyObject *module)
{
    if (PyType_Ready(&RangeSyncerType) < 0)
        return -1;
    Py_INCREF(&RangeSyncerType);
    if (PyModule_AddObject(module, "RangeSyncer", (PyObject *)&RangeSyncerType) < 0) {
        Py_DECREF(&RangeSyncerType);
        return -1;
    }
    return 0;
}
