/*
 * common._storecore's gathers: the records a run of ConsumeQueue units points at in one CommitLog
 * file, copied out for a pull in one call instead of a Python step (a unit unpacked, the limits
 * asked, the file found, the bytes sliced) a message; and the export's ranges of a buffer
 * (bodies, properties) joined into one Arrow value buffer. The pure twins, and the rules, are
 * storage.get_message.gather_records_pure and export.columnar._join_pure;
 * tests/unit/storage/test_pull_gather.py holds them to the same results.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_bytes.h"
#include "_pull_gather.h"
#include "_text.h"
#include "_vectors.h"

#define UNIT_SIZE 20
#define FILLER_SIZE 0x7FFFFFFF

#define GATHER_ARGS 14 /* gather_records's; gather_joined takes the first 12 */

PyDoc_STRVAR(gather_doc,
"gather_records(units, start, base_offset, mm, file_from, readable, max_phy, memory_limit,\n"
"               max_nums, count, total, limits, records, queue_offsets)\n"
"    -> (next, max_pulling, full)\n\n"
"Copy the records that units[start*20:] point at, while they lie in mm (a CommitLog file from\n"
"file_from, readable up to file_from + readable), appending each to `records` and its queue\n"
"offset (base_offset + unit index) to `queue_offsets`, until the pull is full by `limits`\n"
"(memory bytes, memory count, disk bytes, disk count) with `count` records of `total` bytes\n"
"taken before. Fillers are passed over. Returns the index of the first unit not taken, the\n"
"CommitLog offset of the last unit looked at (-1 for none), and whether the pull is full\n"
"(storage.get_message.gather_records_pure).");

PyDoc_STRVAR(joined_doc,
"gather_joined(units, start, base_offset, mm, file_from, readable, max_phy, memory_limit,\n"
"              max_nums, count, total, limits)\n"
"    -> (next, max_pulling, full, taken, records)\n\n"
"gather_records's records as one bytes, the records one after another, and how many it took:\n"
"a pull's body made in one copy, with no object a record (its queue offsets are not listed).\n"
"(storage.get_message.gather_joined_pure)");

/* A gather's arguments, read once (both gathers take the same first 12). */
typedef struct {
    Py_buffer units, file;
    long long start, base_offset, file_from, readable, max_phy, memory_limit, max_nums;
    long long count, total, limits[4];
} Gather;

/* 0 with both buffers held (release_gather), or -1 with an exception set. */
static int
read_gather(PyObject *const *args, Gather *g)
{
    if (!PyTuple_Check(args[11]) || PyTuple_GET_SIZE(args[11]) != 4) {
        PyErr_SetString(PyExc_TypeError, "a gather takes 4 limits");
        return -1;
    }
    long long *fields[9] = {&g->start, &g->base_offset, &g->file_from, &g->readable, &g->max_phy,
                            &g->memory_limit, &g->max_nums, &g->count, &g->total};
    const int at[9] = {1, 2, 4, 5, 6, 7, 8, 9, 10};
    for (int i = 0; i < 9; i++) {
        *fields[i] = PyLong_AsLongLong(args[at[i]]);
        if (*fields[i] == -1 && PyErr_Occurred())
            return -1;
    }
    for (int i = 0; i < 4; i++) {
        g->limits[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(args[11], i));
        if (g->limits[i] == -1 && PyErr_Occurred())
            return -1;
    }
    if (PyObject_GetBuffer(args[0], &g->units, PyBUF_SIMPLE) < 0)
        return -1;
    if (PyObject_GetBuffer(args[3], &g->file, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&g->units);
        return -1;
    }
    if (g->readable > g->file.len)
        g->readable = g->file.len; /* (never past the mapping, whatever the caller said) */
    if (g->readable < 0)
        g->readable = 0;
    if (g->start < 0)
        g->start = 0;
    return 0;
}

static void
release_gather(Gather *g)
{
    PyBuffer_Release(&g->file);
    PyBuffer_Release(&g->units);
}

/* What read_queue's loop decides from unit g->start on, taking nothing yet: the index of the
 * first unit not taken (every unit before it from g->start is taken or a filler), with
 * g->count and g->total moved past the taken ones, *max_pulling the CommitLog offset of the
 * last unit looked at (-1 for none) and *full whether the pull is full. */
static Py_ssize_t
walk(Gather *g, long long *max_pulling, int *full)
{
    Py_ssize_t n_units = g->units.len / UNIT_SIZE;
    const unsigned char *u = (const unsigned char *)g->units.buf;
    *max_pulling = -1;
    *full = 0;
    if (g->start >= n_units)
        return (Py_ssize_t)g->start; /* nothing from there: the first unit not taken is that one */
    Py_ssize_t i = (Py_ssize_t)g->start;
    for (; i < n_units; i++) {
        const unsigned char *unit = u + i * UNIT_SIZE;
        long long phy = (long long)get_u64(unit);
        long long size = (int32_t)get_u32(unit + 8);
        if (size == FILLER_SIZE)
            continue;
        if (size <= 0 || phy < g->file_from || phy - g->file_from > g->readable - size)
            break; /* elsewhere, or damaged: the caller looks at it */
        *max_pulling = phy;
        if (g->count > 0) {
            int in_disk = g->max_phy - phy > g->memory_limit;
            const long long *limits = g->limits;
            if (g->count >= g->max_nums
                || (in_disk ? (g->total + size > limits[2] || g->count >= limits[3])
                            : (g->total + size > limits[0] || g->count >= limits[1]))) {
                *full = 1;
                break;
            }
        }
        g->count++;
        g->total += size;
    }
    return i;
}

/* The taken unit at index i (walk passed it: inside the file), as (offset in the file, size);
 * 0 for a filler. */
static long long
taken_at(const Gather *g, Py_ssize_t i, long long *size)
{
    const unsigned char *unit = (const unsigned char *)g->units.buf + i * UNIT_SIZE;
    *size = (int32_t)get_u32(unit + 8);
    if (*size == FILLER_SIZE) {
        *size = 0;
        return 0;
    }
    return (long long)get_u64(unit) - g->file_from;
}

static PyObject *
gather_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != GATHER_ARGS) {
        PyErr_Format(PyExc_TypeError, "gather_records() takes %d arguments", GATHER_ARGS);
        return NULL;
    }
    PyObject *records = args[12], *queue_offsets = args[13];
    if (!PyList_Check(records) || !PyList_Check(queue_offsets)) {
        PyErr_SetString(PyExc_TypeError, "gather_records(): records and offsets lists");
        return NULL;
    }
    Gather g;
    if (read_gather(args, &g) < 0)
        return NULL;
    long long max_pulling;
    int full;
    Py_ssize_t stop = walk(&g, &max_pulling, &full);
    const char *data = (const char *)g.file.buf;
    for (Py_ssize_t i = (Py_ssize_t)g.start; i < stop; i++) {
        long long size;
        long long at = taken_at(&g, i, &size);
        if (!size)
            continue;
        PyObject *record = PyBytes_FromStringAndSize(data + at, (Py_ssize_t)size);
        PyObject *queue_offset = record == NULL ? NULL : PyLong_FromLongLong(g.base_offset + i);
        if (queue_offset == NULL || PyList_Append(records, record) < 0
            || PyList_Append(queue_offsets, queue_offset) < 0) {
            Py_XDECREF(record);
            Py_XDECREF(queue_offset);
            release_gather(&g);
            return NULL;
        }
        Py_DECREF(record);
        Py_DECREF(queue_offset);
    }
    release_gather(&g);
    return Py_BuildValue("(nLO)", stop, max_pulling, full ? Py_True : Py_False);
}

static PyObject *
gather_joined(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != GATHER_ARGS - 2) {
        PyErr_Format(PyExc_TypeError, "gather_joined() takes %d arguments", GATHER_ARGS - 2);
        return NULL;
    }
    Gather g;
    if (read_gather(args, &g) < 0)
        return NULL;
    long long count_before = g.count, total_before = g.total, max_pulling;
    int full;
    Py_ssize_t stop = walk(&g, &max_pulling, &full);
    PyObject *joined = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(g.total - total_before));
    if (joined == NULL) {
        release_gather(&g);
        return NULL;
    }
    char *out = PyBytes_AS_STRING(joined), *end = out + PyBytes_GET_SIZE(joined);
    const char *data = (const char *)g.file.buf;
    for (Py_ssize_t i = (Py_ssize_t)g.start; i < stop; i++) {
        long long size;
        long long at = taken_at(&g, i, &size);
        if (!size)
            continue; /* a filler */
        if (size > end - out) { /* (units changed since the walk: never hand out the rest) */
            release_gather(&g);
            Py_DECREF(joined);
            PyErr_SetString(PyExc_RuntimeError, "gather_joined(): the units changed");
            return NULL;
        }
        memcpy(out, data + at, (size_t)size);
        out += size;
    }
    release_gather(&g);
    return Py_BuildValue("(nLOLN)", stop, max_pulling, full ? Py_True : Py_False,
                        g.count - count_before, joined);
}

PyDoc_STRVAR(join_doc,
"join_ranges(data, starts, lengths) -> (offsets, values)\n\n"
"The slices data[start:start + length] (starts and lengths int64 vectors) joined into one\n"
"bytes, with their int32 offsets (n + 1 of them, native order) as Arrow's variable-width\n"
"columns want them: what export.columnar._join_pure makes. ValueError for a range outside\n"
"data, OverflowError past 2 GiB of values.");

static PyObject *
join_ranges(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "join_ranges() takes 3 arguments");
        return NULL;
    }
    Py_buffer data, starts, lengths;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0)
        return NULL;
    if (int64_vector(args[1], &starts, "join_ranges() needs int64 starts and lengths") < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    if (int64_vector(args[2], &lengths, "join_ranges() needs int64 starts and lengths") < 0) {
        PyBuffer_Release(&starts);
        PyBuffer_Release(&data);
        return NULL;
    }
    PyObject *offsets = NULL, *values = NULL, *result = NULL;
    Py_ssize_t n = starts.len / 8;
    const char *start = (const char *)starts.buf, *length = (const char *)lengths.buf;
    int64_t total = 0;
    if (lengths.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "join_ranges(): as many lengths as starts");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) { /* every range checked before a byte is copied */
        int64_t s = int64_at(start, i), l = int64_at(length, i);
        if (s < 0 || l < 0 || s > data.len || l > data.len - s) {
            PyErr_Format(PyExc_ValueError, "join_ranges(): range %zd lies outside the data", i);
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) { /* (each within the data: no sum overflows first) */
        total += int64_at(length, i);
        if (total >= ((int64_t)1 << 31)) {
            PyErr_SetString(PyExc_OverflowError, "a batch of more than 2 GiB of values");
            goto done;
        }
    }
    offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * (Py_ssize_t)sizeof(int32_t));
    values = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (offsets == NULL || values == NULL)
        goto done;
    int32_t *o = (int32_t *)PyBytes_AS_STRING(offsets);
    char *v = PyBytes_AS_STRING(values);
    const char *d = (const char *)data.buf;
    int32_t at = 0;
    o[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t l = int64_at(length, i);
        memcpy(v + at, d + int64_at(start, i), (size_t)l);
        at += (int32_t)l;
        o[i + 1] = at;
    }
    result = PyTuple_Pack(2, offsets, values);
done:
    Py_XDECREF(offsets);
    Py_XDECREF(values);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&data);
    return result;
}

PyDoc_STRVAR(starts_doc,
"record_starts(body, end) -> (starts, size)\n\n"
"Where each record of a pull response's body starts (native int64s, as bytes), walking the\n"
"records' TOTALSIZE fields from 0 up to the first record at or past queue offset `end`, or\n"
"of size <= 0, or too short a tail to hold a TOTALSIZE and QUEUEOFFSET; and where that walk\n"
"stopped. What export.pull_reader._record_starts_pure returns.");

#define STARTS_HEAD 28 /* TOTALSIZE@0 .. QUEUEOFFSET@20, 8 bytes */

/* The walk record_starts describes: the number of records, their starts into `out` (when not
 * NULL), where it stopped into *stop. */
static Py_ssize_t
walk_records(const unsigned char *b, Py_ssize_t len, long long end, int64_t *out, Py_ssize_t *stop)
{
    Py_ssize_t n = 0, pos = 0;
    while (pos <= len - STARTS_HEAD) {
        int32_t size = (int32_t)get_u32(b + pos);
        if ((int64_t)get_u64(b + pos + 20) >= end || size <= 0)
            break;
        if (out != NULL)
            out[n] = pos;
        n++;
        pos += size;
    }
    *stop = pos;
    return n;
}

static PyObject *
record_starts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "record_starts() takes 2 arguments");
        return NULL;
    }
    long long end = PyLong_AsLongLong(args[1]);
    if (end == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer body;
    if (PyObject_GetBuffer(args[0], &body, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *b = (const unsigned char *)body.buf;
    Py_ssize_t stop;
    Py_ssize_t n = walk_records(b, body.len, end, NULL, &stop); /* counted, allocated once */
    PyObject *starts = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    if (starts != NULL)
        walk_records(b, body.len, end, (int64_t *)PyBytes_AS_STRING(starts), &stop);
    PyBuffer_Release(&body);
    if (starts == NULL)
        return NULL;
    return Py_BuildValue("(Nn)", starts, stop);
}

static PyMethodDef pull_gather_methods[] = {
    {"gather_records", (PyCFunction)(void (*)(void))gather_records, METH_FASTCALL, gather_doc},
    {"gather_joined", (PyCFunction)(void (*)(void))gather_joined, METH_FASTCALL, joined_doc},
    {"join_ranges", (PyCFunction)(void (*)(void))join_ranges, METH_FASTCALL, join_doc},
    {"record_starts", (PyCFunction)(void (*)(void))record_starts, METH_FASTCALL, starts_doc},
    {NULL, NULL, 0, NULL},
};

int
pull_gather_add_functions(PyObject *module)
{
    return PyModule_AddFunctions(module, pull_gather_methods);
}
