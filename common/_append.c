/*
 * common._storecore's one-step put: CommitLog.append_plain in C (storage/commitlog.py keeps
 * its pure twin, CommitLog._append_plain_pure, which stays the reference).
 *
 * A sender's common message (the send processor has checked every field) is encoded, written
 * with pwrite at the CommitLog's wrote position and accounted for (queue offset, the appended
 * entry dispatch reads, the file's wrote position) under the CommitLog's put lock, in one call
 * instead of ~10 of Python. It reads and writes the same attributes the pure method does, in
 * the same order (the page warmer's calls included), and returns what it returns; whatever it
 * does not do itself (a transient store pool's write buffer, values of an unexpected type or
 * size) it hands to the pure method before changing anything. tests/unit/storage/test_put_plain.py holds
 * the two to the same files and results.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "_append.h"
#include "_file_write.h"
#include "_record.h"

#ifndef _WIN32

#define END_FILE_MIN_BLANK_LENGTH 8

/* storage.commitlog's namespace: its ``time`` is read there on every put, as the pure method
 * reads it (a test may give the module a clock of its own). */
static PyObject *commitlog_globals;
static PyObject *s_time, *s_monotonic;
static PyObject *s_put_lock, *s_acquire, *s_release, *s_mapped_file_queue, *s_mapped_files;
static PyObject *s_write_buffer, *s_fd, *s_wrote_position, *s_file_size, *s_allocated_position;
static PyObject *s_file_from_offset, *s_store_timestamp, *s_store_host_bytes, *s_store_host_v6;
static PyObject *s_page_warmer, *s_topic_queue_table, *s_appended, *s_append;
static PyObject *s_msg_id_prefix, *s_begin_time_in_lock, *s_on_append,
    *s_hook_failed, *s_refusal;
static PyObject *s_pure, *s_claim_early, *s_after_claim, *s_extend, *s_pop, *s_pure_run;

/* An attribute that must be an int fitting int64; -1 with an exception set otherwise. */
static int
int_attr(PyObject *obj, PyObject *name, long long *out)
{
    PyObject *value = PyObject_GetAttr(obj, name);
    if (value == NULL)
        return -1;
    if (!PyLong_CheckExact(value)) {
        Py_DECREF(value);
        PyErr_Format(PyExc_TypeError, "%U is not an int", name);
        return -1;
    }
    *out = PyLong_AsLongLong(value);
    Py_DECREF(value);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* obj.name = value, taking the new reference `value` (NULL: its creation failed). */
static int
set_attr_new(PyObject *obj, PyObject *name, PyObject *value)
{
    if (value == NULL)
        return -1;
    int failed = PyObject_SetAttr(obj, name, value);
    Py_DECREF(value);
    return failed;
}

#define set_int_attr(obj, name, v) set_attr_new(obj, name, PyLong_FromLongLong(v))
#define set_float_attr(obj, name, v) set_attr_new(obj, name, PyFloat_FromDouble(v))

/* ``time.<name>()`` with the CommitLog module's ``time``, as a double; -1.0 with an exception
 * set on failure. */
static double
clock_now(PyObject *name)
{
    if (commitlog_globals == NULL) {
        PyObject *module = PyImport_ImportModule("storage.commitlog");
        if (module == NULL)
            return -1.0;
        commitlog_globals = Py_NewRef(PyModule_GetDict(module));
        Py_DECREF(module);
    }
    PyObject *time = PyDict_GetItemWithError(commitlog_globals, s_time); /* borrowed */
    if (time == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "storage.commitlog has no time");
        return -1.0;
    }
#ifdef __linux__
    /* While that is the time module and the clock asked for is its own function (a test may
     * patch either), read the clock here, as that function does, without a call through
     * Python. Linux only: there time.monotonic() is CLOCK_MONOTONIC (not on macOS). */
    if (PyModule_CheckExact(time)) {
        PyObject *now = PyDict_GetItemWithError(PyModule_GetDict(time), name); /* borrowed */
        if (now == NULL && PyErr_Occurred())
            return -1.0;
        int monotonic = name == s_monotonic;
        if (now != NULL && PyCFunction_Check(now) && PyCFunction_GET_SELF(now) == time
            && strcmp(((PyCFunctionObject *)now)->m_ml->ml_name,
                      monotonic ? "monotonic" : "time") == 0) {
            /* (only the time module's own functions have it as their self) */
            struct timespec ts;
            if (clock_gettime(monotonic ? CLOCK_MONOTONIC : CLOCK_REALTIME, &ts) == 0) {
                /* (as _PyTime_AsSecondsDouble: nanoseconds as one integer, then divided) */
                long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
                if (ns % 1000000000LL == 0)
                    return (double)(ns / 1000000000LL);
                return (double)ns / 1e9;
            }
        }
    }
#endif
    PyObject *t = PyObject_CallMethodNoArgs(time, name);
    if (t == NULL)
        return -1.0;
    double value = PyFloat_AsDouble(t);
    Py_DECREF(t);
    return value;
}

/* What a put under the lock came to. */
enum { WROTE = 1, DECLINED = 0, DELEGATE = 2, FAILED = -1 };

typedef struct {
    PyObject *topic, *topic_bytes, *properties, *born_host, *body, *store_host;
    const char *props;
    Py_ssize_t props_len;
    long long queue_id, flag, sys_flag, born_ts, reconsume, total;
    uint32_t crc;
    /* out */
    long long offset, queue_offset;
    double begin;
} Put;

/* The put failed after the blocks were claimed (the exception is set: a pwrite's OSError, or
 * whatever the page warmer's calls raised): zero what may have been written (nothing else has
 * changed yet), then raise the CommitLog's typed refusal for it from the error, as the pure
 * method does. A zeroing that fails changes nothing: those bytes lie beyond the wrote position,
 * never read, and the next put writes over them. */
static void
refuse(PyObject *self, int fd, unsigned char *staging, long long total, long long start)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    memset(staging, 0, (size_t)total);
    (void)pwrite_fully(fd, (const char *)staging, (Py_ssize_t)total, start);
    if (traceback != NULL)
        PyException_SetTraceback(value, traceback);
    if (!PyErr_GivenExceptionMatches(value, PyExc_Exception)) {
        PyErr_Restore(type, value, traceback); /* (KeyboardInterrupt and the like: as they are) */
        return;
    }
    PyObject *refusal = PyObject_CallMethodOneArg(self, s_refusal, value);
    if (refusal != NULL) {
        PyException_SetCause(refusal, Py_NewRef(value));
        PyErr_SetObject((PyObject *)Py_TYPE(refusal), refusal);
        Py_DECREF(refusal);
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
}

/* Undo a run's accounting that failed partway, keeping the error set: each queue's next offset
 * back to what it was (``before``, or ``one_key`` and ``one_before`` for a put by itself: None
 * where the table had none), and every entry for dispatch
 * at or past the run's first offset taken back off the deque's right end (only the put lock's
 * holder appends there, and nothing reads past the wrote position, which has not moved). */
static void
undo_accounting(PyObject *table, PyObject *before, PyObject *one_key, PyObject *one_before,
                PyObject *appended, long long first)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (table != NULL && before != NULL) {
        Py_ssize_t pos = 0;
        PyObject *key, *old;
        while (PyDict_Next(before, &pos, &key, &old)) {
            if (old == Py_None ? PyDict_DelItem(table, key) : PyDict_SetItem(table, key, old))
                PyErr_Clear(); /* (absent already) */
        }
    }
    if (table != NULL && one_key != NULL && one_before != NULL) { /* (a put by itself) */
        if (one_before == Py_None ? PyDict_DelItem(table, one_key)
                                  : PyDict_SetItem(table, one_key, one_before))
            PyErr_Clear();
    }
    while (appended != NULL && PyObject_Length(appended) > 0) {
        PyObject *last = PySequence_GetItem(appended, -1);
        PyObject *offset = last != NULL && PyTuple_Check(last) && PyTuple_GET_SIZE(last) > 0
            ? PyTuple_GET_ITEM(last, 0) : NULL;
        long long at = offset != NULL ? PyLong_AsLongLong(offset) : -1;
        Py_XDECREF(last);
        if (at < first)
            break;
        PyObject *popped = PyObject_CallMethodNoArgs(appended, s_pop);
        if (popped == NULL)
            break;
        Py_DECREF(popped);
    }
    PyErr_Clear();
    PyErr_Restore(type, value, traceback);
}

/* Records up to this size are staged on the stack (a put of a few KiB: most of them). */
#define STACK_STAGING 8192

/* (topic, queue id): a key of the CommitLog's topic-queue table. Built item by item, as
 * Py_BuildValue would parse its format on every put. */
static PyObject *
pair_of(PyObject *topic, long long queue_id)
{
    PyObject *id = PyLong_FromLongLong(queue_id);
    if (id == NULL)
        return NULL;
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) {
        Py_DECREF(id);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, Py_NewRef(topic));
    PyTuple_SET_ITEM(pair, 1, id);
    return pair;
}

/* The entry dispatch reads for a written put (CommitLog.appended): (offset, total, store
 * timestamp, queue offset, topic, queue id, sys flag, 0, properties). */
static PyObject *
appended_entry(const Put *put, long long store_ts)
{
    PyObject *entry = PyTuple_New(9);
    if (entry == NULL)
        return NULL;
    const long long numbers[7] = {put->offset, put->total, store_ts, put->queue_offset, 0,
                                  put->queue_id, put->sys_flag};
    for (int i = 0; i < 7; i++) {
        if (i == 4)
            continue;
        PyObject *number = PyLong_FromLongLong(numbers[i]);
        if (number == NULL) {
            Py_DECREF(entry); /* (its empty slots are NULL: tupledealloc skips them) */
            return NULL;
        }
        PyTuple_SET_ITEM(entry, i, number);
    }
    PyTuple_SET_ITEM(entry, 4, Py_NewRef(put->topic));
    PyTuple_SET_ITEM(entry, 7, PyLong_FromLong(0)); /* (a small int: never fails) */
    PyTuple_SET_ITEM(entry, 8, Py_NewRef(put->properties));
    return entry;
}

/* The puts of a run, with the put lock held: WROTE (*wrote of them, the first ones, each with
 * its offset, queue_offset and begin set), DECLINED (none fits the file as claimed: a new
 * file, blocks to claim), DELEGATE (nothing read that matters: the pure method takes it) or
 * FAILED (an exception; nothing of the run written). The records fitting the file are encoded
 * into one buffer and written with one pwrite, then accounted for together (queue offsets,
 * the entries dispatch reads, the file's wrote position last: visible from then). */
static int
run_locked(PyObject *self, Put *puts, Py_ssize_t count, Py_ssize_t *wrote)
{
    int outcome = FAILED;
    long long start = 0, file_size, allocated, fd = -1;
    PyObject *queue = NULL, *files = NULL, *mapped_file = NULL, *attr = NULL, *table = NULL;
    PyObject *warmer = NULL, *pending = NULL, *entries = NULL, *before = NULL;
    PyObject *appended = NULL;
    PyObject *one_key = NULL, *one_before = NULL, *one_next = NULL, *one_entry = NULL;
    unsigned char *staging = NULL;
    unsigned char stack_staging[STACK_STAGING];
    int timed = 0, stamped = 0;
    long long old_store_ts = 0, base = 0;
    Py_ssize_t fit = 0;
    long long total = 0;

    *wrote = 0;
    queue = PyObject_GetAttr(self, s_mapped_file_queue);
    if (queue == NULL)
        goto done;
    files = PyObject_GetAttr(queue, s_mapped_files);
    if (files == NULL)
        goto done;
    if (!PyList_Check(files)) {
        outcome = DELEGATE;
        goto done;
    }
    if (PyList_GET_SIZE(files) == 0) {
        outcome = DECLINED;
        goto done;
    }
    mapped_file = Py_NewRef(PyList_GET_ITEM(files, PyList_GET_SIZE(files) - 1));
    warmer = PyObject_GetAttr(self, s_page_warmer);
    if (warmer == NULL)
        goto done;
    attr = PyObject_GetAttr(mapped_file, s_write_buffer);
    if (attr == NULL)
        goto done;
    if (attr != Py_None) { /* a transient store pool's buffer, not the file */
        outcome = DELEGATE;
        goto done;
    }
    Py_CLEAR(attr);
    if (int_attr(mapped_file, s_wrote_position, &start) < 0
        || int_attr(mapped_file, s_file_size, &file_size) < 0
        || int_attr(mapped_file, s_allocated_position, &allocated) < 0
        || int_attr(mapped_file, s_fd, &fd) < 0)
        goto done;
    for (; fit < count; fit++) {
        long long end = start + total + puts[fit].total;
        if (end + END_FILE_MIN_BLANK_LENGTH > file_size || end > allocated)
            break; /* this one and the rest: a new file, or blocks to claim: the general put */
        total += puts[fit].total;
    }
    if (fit == 0) {
        outcome = DECLINED;
        goto done;
    }
    if (fd < 0 || fd > INT32_MAX) {
        outcome = DELEGATE;
        goto done;
    }
    double begin = clock_now(s_monotonic);
    if (begin == -1.0 && PyErr_Occurred())
        goto done;
    if (set_float_attr(self, s_begin_time_in_lock, begin) < 0)
        goto done;
    timed = 1;
    double now = clock_now(s_time);
    if (now == -1.0 && PyErr_Occurred())
        goto done;
    long long store_ts = (long long)(now * 1000);
    if (int_attr(mapped_file, s_file_from_offset, &base) < 0)
        goto done;
    table = PyObject_GetAttr(self, s_topic_queue_table);
    if (table == NULL)
        goto done;
    if (!PyDict_Check(table)) {
        outcome = DELEGATE;
        goto done;
    }
    /* Each queue's next offset after the run, put into the table once the records are in
     * (``before``: what the table held, for an undo). One put needs no dictionaries and no
     * list: its key, its queue's values and its entry are held as they are. */
    if (fit > 1) {
        pending = PyDict_New();
        before = PyDict_New();
        entries = PyList_New(fit);
        if (pending == NULL || before == NULL || entries == NULL)
            goto done;
    }
    /* (a put's record fits the stack: no allocation for it) */
    staging = total <= STACK_STAGING ? stack_staging : PyMem_Malloc((size_t)total);
    if (staging == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    long long at = 0;
    for (Py_ssize_t i = 0; i < fit; i++) {
        Put *put = &puts[i];
        long long queue_offset = 0;
        PyObject *key = pair_of(put->topic, put->queue_id);
        if (key == NULL)
            goto done;
        PyObject *known = pending != NULL ? PyDict_GetItemWithError(pending, key) : NULL;
        if (known == NULL && !PyErr_Occurred()) { /* (borrowed, both) */
            known = PyDict_GetItemWithError(table, key);
            if (known != NULL || !PyErr_Occurred()) {
                if (before == NULL) {
                    one_key = Py_NewRef(key);
                    one_before = Py_NewRef(known != NULL ? known : Py_None);
                }
                else if (PyDict_SetItem(before, key, known != NULL ? known : Py_None) < 0) {
                    Py_DECREF(key);
                    goto done;
                }
            }
        }
        if (known == NULL && PyErr_Occurred()) {
            Py_DECREF(key);
            goto done;
        }
        if (known != NULL) {
            queue_offset = PyLong_AsLongLong(known);
            if (queue_offset == -1 && PyErr_Occurred()) {
                Py_DECREF(key);
                goto done;
            }
        }
        PyObject *next = PyLong_FromLongLong(queue_offset + 1);
        int failed = next == NULL || (pending != NULL && PyDict_SetItem(pending, key, next) < 0);
        if (pending == NULL && next != NULL)
            one_next = Py_NewRef(next);
        Py_XDECREF(next);
        Py_DECREF(key);
        if (failed)
            goto done;
        put->offset = base + start + at;
        put->queue_offset = queue_offset;
        put->begin = begin;
        RecordHead head = {
            put->total, put->crc, put->queue_id, put->flag, queue_offset, put->offset,
            put->sys_flag, put->born_ts, store_ts, put->reconsume, 0,
            (const unsigned char *)PyBytes_AS_STRING(put->born_host),
            (const unsigned char *)PyBytes_AS_STRING(put->store_host),
            (const unsigned char *)PyBytes_AS_STRING(put->body),
            (const unsigned char *)PyBytes_AS_STRING(put->topic_bytes),
            PyBytes_GET_SIZE(put->born_host), PyBytes_GET_SIZE(put->store_host),
            PyBytes_GET_SIZE(put->body), PyBytes_GET_SIZE(put->topic_bytes), put->props_len,
        };
        unsigned char *p = write_record_head(staging + at, &head);
        memcpy(p, put->props, (size_t)put->props_len);
        PyObject *entry = appended_entry(put, store_ts);
        if (entry == NULL)
            goto done;
        if (entries != NULL)
            PyList_SET_ITEM(entries, i, entry);
        else
            one_entry = entry;
        at += put->total;
    }
    if (warmer != Py_None) {
        /* Claim the next step of blocks ahead, then ask for its pages (as the pure method). */
        PyObject *upto = PyLong_FromLongLong(start + total);
        if (upto != NULL) {
            attr = PyObject_CallMethodOneArg(mapped_file, s_claim_early, upto);
            if (attr != NULL) {
                Py_DECREF(attr);
                attr = PyObject_CallMethodObjArgs(warmer, s_after_claim, mapped_file, upto, NULL);
            }
            Py_DECREF(upto);
            Py_CLEAR(attr);
        }
        if (PyErr_Occurred())
            goto done;
    }
    if (pwrite_fully((int)fd, (const char *)staging, (Py_ssize_t)total, start) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    /* The records are in the file: account for them, the wrote position last (what fails
     * here is undone below, and the run refused as if none of it were written). */
    if (int_attr(mapped_file, s_store_timestamp, &old_store_ts) < 0)
        goto done;
    appended = PyObject_GetAttr(self, s_appended);
    if (appended == NULL)
        goto done;
    /* (extended with a tuple of one for a put by itself, as the pure method extends it) */
    PyObject *added = NULL;
    if (entries != NULL) {
        added = PyObject_CallMethodOneArg(appended, s_extend, entries);
    }
    else {
        PyObject *one = PyTuple_Pack(1, one_entry);
        if (one != NULL) {
            added = PyObject_CallMethodOneArg(appended, s_extend, one);
            Py_DECREF(one);
        }
    }
    if (added == NULL)
        goto done;
    Py_DECREF(added);
    if (pending != NULL ? PyDict_Update(table, pending) < 0
                        : PyDict_SetItem(table, one_key, one_next) < 0)
        goto done;
    stamped = 1;
    if (set_int_attr(mapped_file, s_store_timestamp, store_ts) < 0
        || set_int_attr(mapped_file, s_wrote_position, start + total) < 0)
        goto done;
    *wrote = fit;
    outcome = WROTE;
done:
    if (outcome == FAILED && staging != NULL) {
        /* Once the records are being made, whatever fails refuses the run, none of it kept. */
        undo_accounting(table, before, one_key, one_before, appended, base + start);
        if (stamped) {
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            if (set_int_attr(mapped_file, s_store_timestamp, old_store_ts) < 0)
                PyErr_Clear();
            PyErr_Restore(type, value, traceback);
        }
        refuse(self, (int)fd, staging, total, start);
    }
    if (timed) {
        /* Whatever happened, the lock is no longer held (else OS_PAGECACHE_BUSY on every put
         * after a second). */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (set_float_attr(self, s_begin_time_in_lock, 0.0) < 0) {
            if (type == NULL && outcome != WROTE) {
                outcome = FAILED; /* (nothing written: the error is the run's) */
                PyErr_Fetch(&type, &value, &traceback);
            }
            else {
                PyErr_Clear(); /* (written: the records stand, answered as such) */
            }
        }
        PyErr_Restore(type, value, traceback);
    }
    if (staging != stack_staging)
        PyMem_Free(staging);
    Py_XDECREF(appended);
    Py_XDECREF(before);
    Py_XDECREF(entries);
    Py_XDECREF(pending);
    Py_XDECREF(one_key);
    Py_XDECREF(one_before);
    Py_XDECREF(one_next);
    Py_XDECREF(one_entry);
    Py_XDECREF(table);
    Py_XDECREF(attr);
    Py_XDECREF(warmer);
    Py_XDECREF(mapped_file);
    Py_XDECREF(files);
    Py_XDECREF(queue);
    return outcome;
}

/* Call the pure twin with the same arguments (args[0] is the CommitLog). */
static PyObject *
call_pure(PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *method = PyObject_GetAttr(args[0], s_pure);
    if (method == NULL)
        return NULL;
    PyObject *result = PyObject_Vectorcall(method, args + 1, (size_t)(nargs - 1), NULL);
    Py_DECREF(method);
    return result;
}

/* An int argument that fits int32; 0 when it does not (the pure method decides). */
static int
int32_arg(PyObject *value, long long *out)
{
    if (!PyLong_CheckExact(value))
        return 0;
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    return !overflow && *out >= INT32_MIN && *out <= INT32_MAX;
}

PyDoc_STRVAR(append_plain_doc,
"append_plain(commit_log, topic, topic_bytes, queue_id, flag, body, properties, sys_flag,\n"
"             born_timestamp, born_host, reconsume_times) -> tuple | None\n\n"
"CommitLog.append_plain in one call (its pure twin: CommitLog._append_plain_pure): (wrote\n"
"offset, total, queue offset, msgId, milliseconds in the lock), or None having written\n"
"nothing.");

#define APPEND_ARGS 11

/* What reading a put's arguments (args[0] is the CommitLog) came to. */
enum { READ_OK = 1, READ_PURE = 0, READ_NONE = 2, READ_FAILED = -1 };

/* A put's arguments into `put` (its store host and sizes, for `store_host`, its CRC), checked as
 * the compiled put needs them: READ_OK; READ_PURE for what only the pure method copes with (or
 * words); READ_NONE for a put only the general path takes (properties that are not UTF-8 or too
 * long), READ_FAILED with an exception set. */
static int
read_put(PyObject *const *args, PyObject *store_host, int store_v6, Put *put)
{
    memset(put, 0, sizeof *put);
    put->topic = args[1];
    put->topic_bytes = args[2];
    put->body = args[5];
    put->properties = args[6];
    put->born_host = args[9];
    put->store_host = store_host;
    int overflow = 0;
    if (!int32_arg(args[3], &put->queue_id) || !int32_arg(args[4], &put->flag)
        || !int32_arg(args[7], &put->sys_flag) || !int32_arg(args[10], &put->reconsume)
        || !PyLong_CheckExact(args[8]) || !PyUnicode_CheckExact(put->topic)
        || !PyBytes_CheckExact(put->topic_bytes) || PyBytes_GET_SIZE(put->topic_bytes) > 127
        || !PyUnicode_CheckExact(put->properties) || !PyBytes_CheckExact(put->body)
        || !PyBytes_CheckExact(put->born_host)
        || (PyBytes_GET_SIZE(put->born_host) != 8 && PyBytes_GET_SIZE(put->born_host) != 20)
        || !PyBytes_CheckExact(store_host)
        || (PyBytes_GET_SIZE(store_host) != 8 && PyBytes_GET_SIZE(store_host) != 20))
        return READ_PURE;
    put->born_ts = PyLong_AsLongLongAndOverflow(args[8], &overflow);
    if (put->born_ts == -1 && PyErr_Occurred())
        return READ_FAILED;
    if (overflow)
        return READ_PURE;
    put->props = PyUnicode_AsUTF8AndSize(put->properties, &put->props_len);
    if (put->props == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return READ_FAILED;
        PyErr_Clear();
        return READ_NONE; /* not UTF-8 (a lone surrogate): the general put words it */
    }
    Py_ssize_t body_len = PyBytes_GET_SIZE(put->body);
    if (put->props_len > 32767 || body_len > 0x7FFFFFFF)
        return READ_NONE;
    put->total = 72 + PyBytes_GET_SIZE(put->born_host) + PyBytes_GET_SIZE(store_host) + body_len
        + 1 + PyBytes_GET_SIZE(put->topic_bytes) + 2 + put->props_len;
    if (PyBytes_GET_SIZE(put->born_host) == 20)
        put->sys_flag |= BORNHOST_V6_FLAG;
    if (store_v6)
        put->sys_flag |= STOREHOST_V6_FLAG;
    put->crc = crc32_of((const unsigned char *)PyBytes_AS_STRING(put->body), body_len)
        & 0x7FFFFFFFu;
    return READ_OK;
}

/* The CommitLog's store host (a new reference) and whether it is IPv6; NULL on failure. */
static PyObject *
store_host_of(PyObject *self, int *v6)
{
    PyObject *host = PyObject_GetAttr(self, s_store_host_bytes);
    if (host == NULL)
        return NULL;
    PyObject *flag = PyObject_GetAttr(self, s_store_host_v6);
    if (flag == NULL) {
        Py_DECREF(host);
        return NULL;
    }
    *v6 = PyObject_IsTrue(flag);
    Py_DECREF(flag);
    if (*v6 < 0) {
        Py_DECREF(host);
        return NULL;
    }
    return host;
}

/* lock.acquire() or lock.release(); -1 with an exception set on failure. */
static int
call_lock(PyObject *lock, PyObject *name)
{
    PyObject *done = PyObject_CallMethodNoArgs(lock, name);
    if (done == NULL)
        return -1;
    Py_DECREF(done);
    return 0;
}

/* lock.release() whatever happened, keeping an error already set first. */
static int
release_keeping_error(PyObject *lock)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (call_lock(lock, s_release) < 0) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        return -1;
    }
    PyErr_Restore(type, value, traceback);
    return 0;
}

/* A written put's result: (wrote offset, total, queue offset, msgId, ms in the lock). Built
 * field by field: Py_BuildValue and PyUnicode_FromFormat parse their formats on every put. */
static PyObject *
put_result(PyObject *prefix, const Put *put, double finished)
{
    static const char digits[] = "0123456789ABCDEF";
    PyObject *msg_id;
    if (PyUnicode_IS_ASCII(prefix)) { /* always: the prefix is hex */
        Py_ssize_t length = PyUnicode_GET_LENGTH(prefix);
        msg_id = PyUnicode_New(length + 16, 127);
        if (msg_id == NULL)
            return NULL;
        Py_UCS1 *text = PyUnicode_1BYTE_DATA(msg_id);
        memcpy(text, PyUnicode_1BYTE_DATA(prefix), (size_t)length);
        unsigned long long offset = (unsigned long long)put->offset;
        for (int i = 15; i >= 0; i--, offset >>= 4)
            text[length + i] = (Py_UCS1)digits[offset & 0xF];
    }
    else {
        char hex[17];
        snprintf(hex, sizeof hex, "%016llX", (unsigned long long)put->offset);
        msg_id = PyUnicode_FromFormat("%U%s", prefix, hex);
        if (msg_id == NULL)
            return NULL;
    }
    PyObject *result = PyTuple_New(5);
    if (result == NULL) {
        Py_DECREF(msg_id);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 3, msg_id);
    PyObject *items[4] = {
        PyLong_FromLongLong(put->offset), PyLong_FromLongLong(put->total),
        PyLong_FromLongLong(put->queue_offset),
        PyFloat_FromDouble((finished - put->begin) * 1000),
    };
    static const int slots[4] = {0, 1, 2, 4};
    int failed = 0;
    for (int i = 0; i < 4; i++) {
        if (items[i] == NULL)
            failed = 1;
        else
            PyTuple_SET_ITEM(result, slots[i], items[i]); /* (the tuple owns it now) */
    }
    if (failed) {
        Py_DECREF(result); /* (its empty slots are NULL: tupledealloc skips them) */
        return NULL;
    }
    return result;
}

/* The CommitLog's msgId prefix (a new reference), checked to be text; NULL on failure. */
static PyObject *
msg_id_prefix(PyObject *self)
{
    PyObject *prefix = PyObject_GetAttr(self, s_msg_id_prefix);
    if (prefix != NULL && !PyUnicode_Check(prefix)) {
        Py_DECREF(prefix);
        PyErr_SetString(PyExc_TypeError, "the CommitLog's msgId prefix is not text");
        return NULL;
    }
    return prefix;
}

/* CommitLog._notify_append without its frame: the ``on_append`` hook called, a failure of it
 * (an Exception) handed to ``_append_hook_failed`` to log. -1 with an exception set when that
 * fails, or for what is not an Exception (KeyboardInterrupt and the like, as they are). */
static int
notify_append(PyObject *self)
{
    PyObject *hook = PyObject_GetAttr(self, s_on_append);
    if (hook == NULL)
        return -1;
    if (hook == Py_None) {
        Py_DECREF(hook);
        return 0;
    }
    PyObject *called = PyObject_CallNoArgs(hook);
    Py_DECREF(hook);
    if (called != NULL) {
        Py_DECREF(called);
        return 0;
    }
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL)
        PyException_SetTraceback(value, traceback);
    PyObject *logged = PyObject_CallMethodOneArg(self, s_hook_failed, value);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    if (logged == NULL)
        return -1;
    Py_DECREF(logged);
    return 0;
}

/* After a run's records are in and the lock let go: dispatch told, then each written put's
 * result (as put_result), in a new list; NULL with an exception set on failure. */
static PyObject *
written_results(PyObject *self, const Put *puts, Py_ssize_t wrote)
{
    double finished = clock_now(s_monotonic);
    if (finished == -1.0 && PyErr_Occurred())
        return NULL;
    if (notify_append(self) < 0)
        return NULL;
    PyObject *prefix = msg_id_prefix(self);
    if (prefix == NULL)
        return NULL;
    PyObject *results = PyList_New(wrote);
    for (Py_ssize_t i = 0; results != NULL && i < wrote; i++) {
        PyObject *one = put_result(prefix, &puts[i], finished);
        if (one == NULL)
            Py_CLEAR(results);
        else
            PyList_SET_ITEM(results, i, one);
    }
    Py_DECREF(prefix);
    return results;
}

static PyObject *
append_plain(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != APPEND_ARGS) {
        PyErr_Format(PyExc_TypeError, "append_plain() takes %d arguments (%zd given)",
                     APPEND_ARGS, nargs);
        return NULL;
    }
    PyObject *self = args[0];
    int store_v6 = 0;
    PyObject *store_host = store_host_of(self, &store_v6);
    if (store_host == NULL)
        return NULL;
    PyObject *result = NULL, *lock = NULL;
    Put put;
    switch (read_put(args, store_host, store_v6, &put)) {
    case READ_FAILED:
        goto out;
    case READ_PURE:
        result = call_pure(args, nargs); /* (the pure method leaves them to the general put) */
        goto out;
    case READ_NONE:
        result = Py_NewRef(Py_None);
        goto out;
    }
    lock = PyObject_GetAttr(self, s_put_lock);
    if (lock == NULL || call_lock(lock, s_acquire) < 0)
        goto out;
    Py_ssize_t wrote;
    int outcome = run_locked(self, &put, 1, &wrote);
    if (release_keeping_error(lock) < 0 || outcome == FAILED)
        goto out;
    if (outcome == DECLINED) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    if (outcome == DELEGATE) {
        result = call_pure(args, nargs);
        goto out;
    }
    PyObject *results = written_results(self, &put, 1);
    if (results != NULL) {
        result = Py_NewRef(PyList_GET_ITEM(results, 0));
        Py_DECREF(results);
    }
out:
    Py_XDECREF(lock);
    Py_DECREF(store_host);
    return result;
}

PyDoc_STRVAR(append_plain_run_doc,
"append_plain_run(commit_log, puts) -> (results, error)\n\n"
"CommitLog.append_plain_run in one call (its pure twin: CommitLog._append_plain_run_pure):\n"
"the first puts of ``puts`` (tuples of append_plain's arguments) that the one-step put takes and\n"
"the file holds, under one hold of the put lock, their records written with one pwrite:\n"
"(their results, in order; None, or the refusal of a run none of which was written).");

static PyObject *
append_plain_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2 || !PyList_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "append_plain_run() takes a CommitLog and a list");
        return NULL;
    }
    PyObject *self = args[0];
    int store_v6 = 0;
    PyObject *store_host = store_host_of(self, &store_v6);
    if (store_host == NULL)
        return NULL;
    PyObject *result = NULL, *lock = NULL, *results = NULL, *error = NULL;
    Put *done = NULL;
    /* The puts held here while the lock is: a list the caller changes meanwhile (the store
     * host's attribute read above runs Python) cannot free what the records are written from. */
    PyObject *held = PyList_GetSlice(args[1], 0, PY_SSIZE_T_MAX);
    if (held == NULL)
        goto out;
    Py_ssize_t count = PyList_GET_SIZE(held);
    done = PyMem_Calloc(count ? (size_t)count : 1, sizeof *done);
    if (done == NULL) {
        PyErr_NoMemory();
        Py_DECREF(held);
        goto out;
    }
    Py_ssize_t ready = 0;
    for (; ready < count; ready++) {
        PyObject *item = PyList_GET_ITEM(held, ready);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != APPEND_ARGS - 1)
            break; /* (the caller puts it by itself: the pure method words it) */
        PyObject *argv[APPEND_ARGS];
        argv[0] = self;
        for (int i = 1; i < APPEND_ARGS; i++)
            argv[i] = PyTuple_GET_ITEM(item, i - 1);
        int read = read_put(argv, store_host, store_v6, &done[ready]);
        if (read == READ_FAILED) {
            Py_DECREF(held);
            goto out;
        }
        if (read != READ_OK)
            break;
    }
    Py_ssize_t wrote = 0;
    if (ready > 0) {
        lock = PyObject_GetAttr(self, s_put_lock);
        if (lock == NULL || call_lock(lock, s_acquire) < 0) {
            Py_DECREF(held);
            goto out;
        }
        int outcome = run_locked(self, done, ready, &wrote);
        if (outcome == DELEGATE) { /* (a transient store pool's buffer: the pure method) */
            Py_DECREF(held);
            if (release_keeping_error(lock) < 0)
                goto out;
            result = PyObject_CallMethodOneArg(self, s_pure_run, args[1]);
            goto out;
        }
        if (outcome == FAILED) { /* the first put's error: nothing of the run is written */
            PyObject *type, *traceback;
            PyErr_Fetch(&type, &error, &traceback);
            PyErr_NormalizeException(&type, &error, &traceback);
            if (traceback != NULL)
                PyException_SetTraceback(error, traceback);
            if (!PyErr_GivenExceptionMatches(error, PyExc_Exception)) {
                PyErr_Restore(type, error, traceback); /* raised as it is */
                error = NULL;
                release_keeping_error(lock);
                Py_DECREF(held);
                goto out;
            }
            Py_XDECREF(type);
            Py_XDECREF(traceback);
        }
        if (release_keeping_error(lock) < 0) {
            Py_DECREF(held);
            goto out;
        }
    }
    Py_DECREF(held); /* (the written puts' objects: their results copy what they need) */
    results = wrote > 0 ? written_results(self, done, wrote) : PyList_New(0);
    if (results == NULL)
        goto out;
    result = PyTuple_Pack(2, results, error != NULL ? error : Py_None);
out:
    PyMem_Free(done);
    Py_XDECREF(error);
    Py_XDECREF(results);
    Py_XDECREF(lock);
    Py_DECREF(store_host);
    return result;
}

static PyMethodDef append_methods[] = {
    {"append_plain", (PyCFunction)(void (*)(void))append_plain, METH_FASTCALL, append_plain_doc},
    {"append_plain_run", (PyCFunction)(void (*)(void))append_plain_run, METH_FASTCALL,
     append_plain_run_doc},
    {NULL, NULL, 0, NULL},
};

#define INTERN(var, text)                                                                       \
    do {                                                                                          \
        if ((var = PyUnicode_InternFromString(text)) == NULL)                                     \
            return -1;                                                                            \
    } while (0)

int
append_add_functions(PyObject *module)
{
    INTERN(s_time, "time");
    INTERN(s_monotonic, "monotonic");
    INTERN(s_put_lock, "put_lock");
    INTERN(s_acquire, "acquire");
    INTERN(s_release, "release");
    INTERN(s_mapped_file_queue, "mapped_file_queue");
    INTERN(s_mapped_files, "mapped_files");
    INTERN(s_write_buffer, "write_buffer");
    INTERN(s_fd, "_fd");
    INTERN(s_wrote_position, "wrote_position");
    INTERN(s_file_size, "file_size");
    INTERN(s_allocated_position, "allocated_position");
    INTERN(s_file_from_offset, "file_from_offset");
    INTERN(s_store_timestamp, "store_timestamp");
    INTERN(s_store_host_bytes, "store_host_bytes");
    INTERN(s_store_host_v6, "store_host_v6");
    INTERN(s_page_warmer, "page_warmer");
    INTERN(s_topic_queue_table, "topic_queue_table");
    INTERN(s_appended, "appended");
    INTERN(s_append, "append");
    INTERN(s_extend, "extend");
    INTERN(s_pop, "pop");
    INTERN(s_pure_run, "_append_plain_run_pure");
    INTERN(s_msg_id_prefix, "_msg_id_prefix");
    INTERN(s_begin_time_in_lock, "begin_time_in_lock");
    INTERN(s_on_append, "on_append");
    INTERN(s_hook_failed, "_append_hook_failed");
    INTERN(s_refusal, "_refusal");
    INTERN(s_pure, "_append_plain_pure");
    INTERN(s_claim_early, "claim_early");
    INTERN(s_after_claim, "after_claim");
    return PyModule_AddFunctions(module, append_methods);
}

#else /* _WIN32: no pwrite; the store appends through the mapping there (the pure method) */

int
append_add_functions(PyObject *module)
{
    (void)module;
    return 0;
}

#endif
