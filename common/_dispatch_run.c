/*
 * common._storecore's dispatch of a run: the plain records of one topic just appended (a
 * batch's, or a burst of sends), turned into their ConsumeQueue units and index entries in one
 * call each, not a Python call (and a properties scan) per record. The pure twins, and the
 * rules each function follows, are in storage/dispatch_runs.py;
 * tests/unit/storage/test_dispatch_runs.py holds the two to the same results and bytes.
 *
 * An entry is what CommitLog.appended holds for a record: (offset, size, store timestamp,
 * queue offset, topic, queue id, sysFlag, prepared offset, properties).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_bytes.h"
#include "_index_entry.h"
#include "_properties.h"
#include "_dispatch_entry.h"
#include "_dispatch_run.h"
#include "_text.h"

/* ------------------------------------------------------------------------------------------ */

PyDoc_STRVAR(plain_run_doc,
"plain_run(entries, reput_from, readable) -> (count, one_queue)\n\n"
"How many leading entries form one run (storage.dispatch_runs.plain_run_pure): consecutive\n"
"in the log from reput_from and within readable, plain (no transaction bits), all of the first\n"
"entry's topic, properties that have UTF-8; and whether they are all of its queue too.");

static PyObject *
plain_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "plain_run(entries: list, reput_from, readable)");
        return NULL;
    }
    long long expect = PyLong_AsLongLong(args[1]);
    if (expect == -1 && PyErr_Occurred())
        return NULL;
    long long readable = PyLong_AsLongLong(args[2]);
    if (readable == -1 && PyErr_Occurred())
        return NULL;
    PyObject *entries = args[0];
    Py_ssize_t count = 0, total = PyList_GET_SIZE(entries);
    PyObject *topic = NULL;
    long long queue_id = 0;
    int one_queue = 1;
    for (; count < total; count++) {
        PyObject *entry = PyList_GET_ITEM(entries, count);
        if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != ENTRY_FIELDS)
            break;
        int ok = 1;
        long long offset = entry_int(entry, 0, &ok), size = entry_int(entry, 1, &ok);
        entry_int(entry, 3, &ok); /* (an int queue offset: the units are written from it) */
        long long qid = entry_int(entry, 5, &ok), sys_flag = entry_int(entry, 6, &ok);
        PyObject *entry_topic = PyTuple_GET_ITEM(entry, 4);
        if (!ok || offset != expect || offset > readable || size <= 0 || size > readable - offset
            || (sys_flag & 0xC)
            || !PyUnicode_Check(entry_topic))
            break;
        if (count == 0) {
            topic = entry_topic;
            queue_id = qid;
        }
        else if (entry_topic != topic && PyUnicode_Compare(entry_topic, topic) != 0) {
            break; /* (two str: the comparison cannot fail) */
        }
        Py_ssize_t n;
        if (entry_props(entry, &n) == NULL)
            break;
        if (qid != queue_id)
            one_queue = 0;
        expect = offset + size;
    }
    return Py_BuildValue("(nO)", count, one_queue ? Py_True : Py_False);
}

PyDoc_STRVAR(units_into_doc,
"consume_queue_units_into(buf, position, entries, count) -> None\n\n"
"Write the ConsumeQueue units of entries[:count] (a run, see plain_run) at buf[position:]:\n"
"offset, size and the tags code (Java's hashCode of TAGS, 0 without) of each, big-endian, as\n"
"storage.dispatch_runs.consume_queue_units_into_pure does.");

static PyObject *
units_into(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4 || !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "consume_queue_units_into(buf, position, entries: list, count)");
        return NULL;
    }
    Py_ssize_t position, count;
    if (ssize_arg(args[1], &position) < 0 || ssize_arg(args[3], &count) < 0)
        return NULL;
    PyObject *entries = args[2];
    if (count < 0 || count > PyList_GET_SIZE(entries)) {
        PyErr_SetString(PyExc_ValueError, "count is not within the entries");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0)
        return NULL;
    if (position < 0 || position > view.len || count > (view.len - position) / CQ_UNIT_SIZE) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "the units do not fit the buffer");
        return NULL;
    }
    /* Every entry is read before a byte is written: a bad one changes nothing. */
    unsigned char *p = (unsigned char *)view.buf + position;
    for (int pass = 0; pass < 2; pass++) {
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *entry = PyList_GET_ITEM(entries, i);
            int ok = PyTuple_CheckExact(entry) && PyTuple_GET_SIZE(entry) == ENTRY_FIELDS;
            long long offset = ok ? entry_int(entry, 0, &ok) : 0;
            long long size = ok ? entry_int(entry, 1, &ok) : 0;
            Py_ssize_t n = 0;
            const char *props = ok ? entry_props(entry, &n) : NULL;
            if (!ok || props == NULL || size < INT32_MIN || size > INT32_MAX) {
                PyBuffer_Release(&view);
                PyErr_SetString(PyExc_ValueError, "an entry of the run is not a plain record's");
                return NULL;
            }
            if (pass == 0)
                continue;
            const char *found[P_COUNT];
            Py_ssize_t found_len[P_COUNT];
            scan_props(props, n, found, found_len);
            int32_t tags_code = found[P_TAGS] == NULL ? 0 : (int32_t)java_hash_utf8(
                0, (const unsigned char *)found[P_TAGS], found_len[P_TAGS]);
            unsigned char *unit = p + i * CQ_UNIT_SIZE;
            put_u64(unit, (uint64_t)offset);
            put_u32(unit + 8, (uint32_t)size);
            put_u64(unit + 12, (uint64_t)(int64_t)tags_code);
        }
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------------------ */

#define MAX_RUN_KEYS 1024

PyDoc_STRVAR(index_into_doc,
"index_keys_into(buf, hash_slot_num, index_num, index_count, limit, seed, begin_timestamp,\n"
"                last_indexed, entries, count)\n"
"    -> (done, index_count, new_slots, first_keyed, last_keyed, last_touched)\n\n"
"Index the UNIQ_KEY and KEYS of entries[:count] in an index file's mapping, message after\n"
"message as storage.index_file.IndexService.build_index would, stopping before a message whose\n"
"keys would take the entry count past `limit` (storage.dispatch_runs.index_keys_into_pure\n"
"says the rules). Returns how many messages were taken, the new entry count, the empty slots\n"
"filled, and the run index of the first and last message that wrote an entry and of the last\n"
"that had keys at all (-1 for none); the header is the caller's.");

static PyObject *
index_into(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 10 || !PyList_Check(args[8])) {
        PyErr_SetString(PyExc_TypeError, "index_keys_into() takes 10 arguments, entries a list");
        return NULL;
    }
    long long values[8];
    const int at[8] = {1, 2, 3, 4, 5, 6, 7, 9};
    for (int i = 0; i < 8; i++) {
        values[i] = PyLong_AsLongLong(args[at[i]]);
        if (values[i] == -1 && PyErr_Occurred())
            return NULL;
    }
    long long slot_num = values[0], index_num = values[1], index_count = values[2];
    long long limit = values[3], begin = values[5], last_indexed = values[6];
    uint32_t seed = (uint32_t)values[4];
    Py_ssize_t count = (Py_ssize_t)values[7];
    PyObject *entries = args[8];
    if (slot_num <= 0 || index_count < 1 || limit > index_num || count < 0
        || count > PyList_GET_SIZE(entries)) {
        PyErr_SetString(PyExc_ValueError, "index_keys_into(): arguments out of range");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0)
        return NULL;
    long long entries_base = INDEX_HEADER_SIZE + slot_num * 4;
    if (limit > 0 && (long long)view.len < entries_base + limit * INDEX_ENTRY_SIZE) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "the index file's mapping is smaller than the limit");
        return NULL;
    }
    unsigned char *buf = (unsigned char *)view.buf;
    long new_slots = 0;
    Py_ssize_t done = 0, first_keyed = -1, last_keyed = -1, last_touched = -1;
    uint32_t hashes[MAX_RUN_KEYS];
    for (; done < count; done++) {
        PyObject *entry = PyList_GET_ITEM(entries, done);
        int ok = PyTuple_CheckExact(entry) && PyTuple_GET_SIZE(entry) == ENTRY_FIELDS;
        long long offset = ok ? entry_int(entry, 0, &ok) : 0;
        long long store_ts = ok ? entry_int(entry, 2, &ok) : 0;
        Py_ssize_t n = 0;
        const char *props = ok ? entry_props(entry, &n) : NULL;
        if (props == NULL)
            break; /* the caller indexes it, and what follows, one by one */
        if (offset <= last_indexed)
            continue; /* dispatched again after a failure: indexed already */
        const char *found[P_COUNT];
        Py_ssize_t found_len[P_COUNT];
        scan_props(props, n, found, found_len);
        if (found[P_UNIQ] == NULL && found[P_KEYS] == NULL)
            continue;
        /* The keys in the order build_index indexes them: UNIQ_KEY, then every non-empty
         * space-separated KEYS value. */
        int keys = 0;
        if (found[P_UNIQ] != NULL)
            hashes[keys++] = java_hash_utf8(seed, (const unsigned char *)found[P_UNIQ], found_len[P_UNIQ]);
        const char *k = found[P_KEYS], *kend = k + found_len[P_KEYS];
        int overflow = 0;
        while (k != NULL && k < kend) {
            const char *space = memchr(k, ' ', (size_t)(kend - k));
            if (space == NULL)
                space = kend;
            if (space > k) {
                if (keys == MAX_RUN_KEYS) {
                    overflow = 1;
                    break;
                }
                hashes[keys++] = java_hash_utf8(seed, (const unsigned char *)k, space - k);
            }
            k = space + 1;
        }
        if (overflow)
            break; /* more keys than one call takes: one by one */
        if (index_count + keys > limit)
            break;
        last_touched = done;
        if (keys == 0)
            continue;
        if (index_count <= 1) /* the file's first entries: they set its begin timestamp */
            begin = store_ts;
        /* Python's floor division of the difference, clamped to [0, Integer.MAX_VALUE]
         * (the difference taken unsigned: it cannot overflow once store_ts >= begin) */
        unsigned long long later = begin > 0 && store_ts > begin
            ? ((unsigned long long)store_ts - (unsigned long long)begin) / 1000 : 0;
        long long diff = later > (unsigned long long)INT32_MAX_DIFF ? INT32_MAX_DIFF : (long long)later;
        for (int i = 0; i < keys; i++) {
            new_slots += index_put_entry(buf, slot_num, index_count++,
                                         index_key_hash_of(hashes[i]), offset, diff);
        }
        if (first_keyed < 0)
            first_keyed = done;
        last_keyed = done;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nLlnnn)", done, index_count, new_slots, first_keyed, last_keyed,
                         last_touched);
}

static PyMethodDef dispatch_run_methods[] = {
    {"plain_run", (PyCFunction)(void (*)(void))plain_run, METH_FASTCALL, plain_run_doc},
    {"consume_queue_units_into", (PyCFunction)(void (*)(void))units_into, METH_FASTCALL,
     units_into_doc},
    {"index_keys_into", (PyCFunction)(void (*)(void))index_into, METH_FASTCALL, index_into_doc},
    {NULL, NULL, 0, NULL},
};

int
dispatch_run_add_functions(PyObject *module)
{
    return PyModule_AddFunctions(module, dispatch_run_methods);
}
