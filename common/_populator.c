/*
 * common._storecore.Populator: a native thread that faults in pages of mapped files ahead of
 * their writer (Linux's MADV_POPULATE_READ / _WRITE), and never takes the interpreter lock.
 *
 * The CommitLog is written through the page cache (pwrite, storage/mapped_file.py), so the range
 * ahead of its writer is populated for reading: the page-cache pages exist (zeroed) before the
 * writer gets there and no page-table entry is made writable (a writable one costs a TLB flush
 * on every CPU when write-back cleans it). An index file's hash slots are written through the
 * mapping, so they are populated for writing.
 *
 * Why not a Python thread: the page warmer (storage/page_warmer.py) ran on a ServiceThread that
 * took the interpreter lock to wake up and between its system calls. On two busy cores the OS
 * preempted it while it held the lock, and the broker's event loop waited for it: 32 senders
 * lost 8 % and their p99 rose 1.5 -> 2.2 ms (docs/benchmarks.md, session 10). This thread is
 * handed address ranges under a mutex and only ever calls madvise; the writer's side is one
 * mutex and one condition signal per megabyte claimed.
 *
 * A range is turned into addresses when it is submitted and the buffer released at once, so a
 * mapping can be closed at any time (an export held here would make its close fail). Should it
 * be unmapped while its pages are populated, madvise answers ENOMEM; should the addresses have
 * been mapped again meanwhile, populating changes no byte of whatever is there.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>

#include "_populator.h"

#ifdef __linux__
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14; older kernels answer EINVAL */
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
/* One madvise at most this long: populating holds the process's mmap lock (for reading), and a
 * thread that maps or unmaps memory meanwhile (the allocator does) waits for the step to end. */
#define POPULATE_STEP ((uintptr_t)256 * 1024)
/* Ranges asked for once (an index file's hash slots) waiting at a time; more are dropped. */
#define ONCE_SLOTS 8

typedef struct {
    uintptr_t from, to;
    int advice;             /* MADV_POPULATE_READ or MADV_POPULATE_WRITE */
} span;
#endif

typedef struct {
    PyObject_HEAD
#ifdef __linux__
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int running;            /* the thread was started and not yet joined */
    int stopping;           /* read by the worker between steps without the mutex: atomics */
    int supported;          /* the kernel can populate (asked once, at creation) */
    int has_target;
    span target;            /* the newest range ahead of the writer; a newer one replaces it */
    span once[ONCE_SLOTS];
    int once_count;
    unsigned long long warmed;
#endif
} Populator;

#ifdef __linux__
static void *
worker(void *arg)
{
    Populator *self = (Populator *)arg;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    pthread_mutex_lock(&self->mutex);
    for (;;) {
        while (!self->stopping && !self->has_target && self->once_count == 0)
            pthread_cond_wait(&self->cond, &self->mutex);
        if (self->stopping)
            break;
        span s;
        if (self->has_target) {
            s = self->target;
            self->has_target = 0;
        } else {
            s = self->once[--self->once_count];
        }
        pthread_mutex_unlock(&self->mutex);
        int rc = 0;
        for (uintptr_t at = s.from & ~(page - 1); at < s.to && rc == 0; at += POPULATE_STEP) {
            if (__atomic_load_n(&self->stopping, __ATOMIC_RELAXED))
                break;
            size_t length = (size_t)(s.to - at < POPULATE_STEP ? s.to - at : POPULATE_STEP);
            rc = madvise((void *)at, length, s.advice) == 0 ? 0 : errno;
        }
        pthread_mutex_lock(&self->mutex);
        if (rc == 0)
            self->warmed += (unsigned long long)(s.to - s.from);
        /* else unmapped (ENOMEM) or mapped again otherwise (EINVAL) meanwhile, or out of
         * memory: the writer faults as it would anyway. Whether the kernel can populate at all
         * was asked once, at creation (kernel_can_populate). */
    }
    pthread_mutex_unlock(&self->mutex);
    return NULL;
}

static void
stop_worker(Populator *self)
{
    /* Under the interpreter lock: a second stop() (another thread, or dealloc) finds
     * running == 0 before this one lets go of the lock to join, and joins nothing. */
    if (!self->running)
        return;
    self->running = 0;
    pthread_t thread = self->thread;
    pthread_mutex_lock(&self->mutex);
    __atomic_store_n(&self->stopping, 1, __ATOMIC_RELAXED);
    pthread_cond_signal(&self->cond);
    pthread_mutex_unlock(&self->mutex);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(thread, NULL);
    Py_END_ALLOW_THREADS
}

/* MADV_POPULATE_WRITE on a private page of our own: 0 where this kernel cannot (before Linux
 * 5.14 it answers EINVAL for the unknown advice). */
static int
kernel_can_populate(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *probe = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (probe == MAP_FAILED)
        return 0;
    int ok = madvise(probe, page, MADV_POPULATE_WRITE) == 0;
    munmap(probe, page);
    return ok;
}
#endif

static PyObject *
populator_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, ":Populator", keywords))
        return NULL;
    Populator *self = (Populator *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
#ifdef __linux__
    self->supported = kernel_can_populate();
    pthread_mutex_init(&self->mutex, NULL);
    pthread_cond_init(&self->cond, NULL);
    if (!self->supported)
        return (PyObject *)self; /* no thread: nothing will be queued */
    int rc = pthread_create(&self->thread, NULL, worker, self);
    if (rc != 0) {
        Py_DECREF(self);
        errno = rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    self->running = 1;
#endif
    return (PyObject *)self;
}

static void
populator_dealloc(Populator *self)
{
#ifdef __linux__
    stop_worker(self);
    pthread_cond_destroy(&self->cond);
    pthread_mutex_destroy(&self->mutex);
#endif
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* submit / submit_once: 0 queued, 1 nothing to do; -1 with an error set. */
static int
submit(Populator *self, PyObject *const *args, Py_ssize_t nargs, int once)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "takes 3 arguments (mm, start, end)");
        return -1;
    }
#ifdef __linux__
    span s;
    int found = mapped_pages(args, &s.from, &s.to);
    if (found != 0)
        return found;
    s.advice = once ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
    int queued = 0;
    pthread_mutex_lock(&self->mutex);
    if (self->running && self->supported && !self->stopping) {
        if (!once) {
            self->target = s;
            self->has_target = 1;
            queued = 1;
        } else if (self->once_count < ONCE_SLOTS) {
            self->once[self->once_count++] = s;
            queued = 1;
        }
        if (queued)
            pthread_cond_signal(&self->cond);
    }
    pthread_mutex_unlock(&self->mutex);
    return queued ? 0 : 1;
#else
    (void)self;
    (void)args;
    (void)once;
    return 1;
#endif
}

static PyObject *
populator_submit(Populator *self, PyObject *const *args, Py_ssize_t nargs)
{
    int rc = submit(self, args, nargs, 0);
    return rc < 0 ? NULL : PyBool_FromLong(rc == 0);
}

static PyObject *
populator_submit_once(Populator *self, PyObject *const *args, Py_ssize_t nargs)
{
    int rc = submit(self, args, nargs, 1);
    return rc < 0 ? NULL : PyBool_FromLong(rc == 0);
}

static PyObject *
populator_stop(Populator *self, PyObject *unused)
{
    (void)unused;
#ifdef __linux__
    stop_worker(self);
#endif
    Py_RETURN_NONE;
}

static PyObject *
populator_get_warmed(Populator *self, void *closure)
{
    (void)closure;
#ifdef __linux__
    pthread_mutex_lock(&self->mutex);
    unsigned long long warmed = self->warmed;
    pthread_mutex_unlock(&self->mutex);
    return PyLong_FromUnsignedLongLong(warmed);
#else
    (void)self;
    return PyLong_FromLong(0);
#endif
}

static PyObject *
populator_get_supported(Populator *self, void *closure)
{
    (void)closure;
#ifdef __linux__
    return PyBool_FromLong(self->supported);
#else
    (void)self;
    Py_RETURN_FALSE;
#endif
}

static PyObject *
populator_get_running(Populator *self, void *closure)
{
    (void)closure;
#ifdef __linux__
    return PyBool_FromLong(self->running);
#else
    (void)self;
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef populator_methods[] = {
    {"submit", (PyCFunction)(void (*)(void))populator_submit, METH_FASTCALL,
     "submit(mm, start, end) -> bool\n\nPopulate the pages of mm[start:end] soon for reading "
     "(the range ahead of a writer that writes the file with pwrite), in place of any range "
     "submitted before and not yet started. Never waits; False when nothing was queued (an "
     "empty range, a kernel that cannot, a stopped thread)."},
    {"submit_once", (PyCFunction)(void (*)(void))populator_submit_once, METH_FASTCALL,
     "submit_once(mm, start, end) -> bool\n\nPopulate the pages of mm[start:end] soon for "
     "writing (a range written through the mapping), beside the range ahead of the writer (a "
     "few such ranges wait at a time; False when dropped)."},
    {"stop", (PyCFunction)populator_stop, METH_NOARGS,
     "stop()\n\nStop the thread (after the step it is in) and wait for it; again is harmless."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef populator_getset[] = {
    {"warmed_bytes", (getter)populator_get_warmed, NULL, "bytes populated so far", NULL},
    {"supported", (getter)populator_get_supported, NULL,
     "False where the kernel cannot populate (before Linux 5.14, or not Linux)", NULL},
    {"running", (getter)populator_get_running, NULL, "the thread runs (not stopped)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PopulatorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "common._storecore.Populator",
    .tp_basicsize = sizeof(Populator),
    .tp_dealloc = (destructor)populator_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Populator()\n\nA native thread that faults in pages of mapped files "
              "ahead of their writer, without the interpreter lock (MADV_POPULATE_READ/_WRITE).",
    .tp_methods = populator_methods,
    .tp_getset = populator_getset,
    .tp_new = populator_new,
};

int
populator_add_type(PyObject *module)
{
    if (PyType_Ready(&PopulatorType) < 0)
        return -1;
    Py_INCREF(&PopulatorType);
    if (PyModule_AddObject(module, "Populator", (PyObject *)&PopulatorType) < 0) {
        Py_DECREF(&PopulatorType);
        return -1;
    }
    return 0;
}
