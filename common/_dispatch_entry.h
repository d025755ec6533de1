/*
 * What dispatch reads of an appended entry, shared by the dispatch of a run
 * (common/_dispatch_run.c) and of one record (common/_dispatch_one.c). An entry is what
 * CommitLog.appended holds for a record: (offset, size, store timestamp, queue offset, topic,
 * queue id, sysFlag, prepared offset, properties). Header-only.
 */
#ifndef ROCKETDESK_DISPATCH_ENTRY_H
#define ROCKETDESK_DISPATCH_ENTRY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_properties.h"

#define ENTRY_FIELDS 9
#define CQ_UNIT_SIZE 20
#define INT32_MAX_DIFF 2147483647LL

/* An int field of an entry; 0 with *ok cleared (and no exception left) when it is not one. */
static inline long long
entry_int(PyObject *entry, int field, int *ok)
{
    PyObject *value = PyTuple_GET_ITEM(entry, field);
    if (!PyLong_CheckExact(value)) {
        *ok = 0;
        return 0;
    }
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        *ok = 0;
    }
    return v;
}

/* The entry's properties as UTF-8 (cached in the str), or NULL, no exception left, when they
 * have none (a lone surrogate) or are not a str. */
static inline const char *
entry_props(PyObject *entry, Py_ssize_t *n)
{
    PyObject *props = PyTuple_GET_ITEM(entry, 8);
    if (!PyUnicode_Check(props))
        return NULL;
    const char *s = PyUnicode_AsUTF8AndSize(props, n);
    if (s == NULL)
        PyErr_Clear();
    return s;
}

/* The values of TAGS, KEYS and UNIQ_KEY in a properties string (common/_properties.h). */
enum { P_TAGS, P_KEYS, P_UNIQ, P_COUNT };

static inline void
scan_props(const char *s, Py_ssize_t n, const char *found[P_COUNT], Py_ssize_t found_len[P_COUNT])
{
    static const char *const names[P_COUNT] = {"TAGS", "KEYS", "UNIQ_KEY"};
    static const Py_ssize_t lengths[P_COUNT] = {4, 4, 8};
    scan_properties(s, n, P_COUNT, names, lengths, found, found_len);
}

/* Java's String.hashCode continued from `h` over the UTF-16 units of UTF-8 text (valid: it
 * came from a str). */
static inline uint32_t
java_hash_utf8(uint32_t h, const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        uint32_t c = p[i];
        if (c < 0x80) {
            i += 1;
        }
        else if (c < 0xE0) {
            c = ((c & 0x1F) << 6) | (p[i + 1] & 0x3F);
            i += 2;
        }
        else if (c < 0xF0) {
            c = ((c & 0x0F) << 12) | ((uint32_t)(p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F);
            i += 3;
        }
        else {
            c = ((c & 0x07) << 18) | ((uint32_t)(p[i + 1] & 0x3F) << 12)
                | ((uint32_t)(p[i + 2] & 0x3F) << 6) | (p[i + 3] & 0x3F);
            i += 4;
        }
        if (c < 0x10000) {
            h = 31 * h + c;
        }
        else {
            c -= 0x10000;
            h = 31 * h + (0xD800 + (c >> 10));
            h = 31 * h + (0xDC00 + (c & 0x3FF));
        }
    }
    return h;
}

#endif
