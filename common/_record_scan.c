/*
 * common._storecore's recovery scan: how far a CommitLog file's records are good, each record's
 * lengths checked against its TOTALSIZE and its body against its CRC, with no Python step a
 * record. A restart checks the last three files (3 GiB of 1 KiB records: three million records),
 * a crash everything from the checkpoint's file on; the pure twin spent about a microsecond of
 * interpreter a record. The rules, and the words of each problem, are storage.recovery's
 * _scan_pure; tests/unit/storage/test_record_scan.py holds the two to the same results.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>

#include "_bytes.h"
#include "_record.h"
#include "_record_scan.h"
#include "_text.h"

#define BLANK_MAGIC 0xCBD43194u
#define PREFIX_V4 88 /* the bytes an all-IPv4 record's fixed fields take, to BODYLEN's end */

enum problem { NONE, CUT_OFF, BLANK_SHORT, BAD_MAGIC, NO_FIT, LENGTHS, CRC };

typedef struct {
    Py_ssize_t pos, count;
    int64_t last_ts, total;
    uint32_t magic;
    int reached_end;
    enum problem problem;
} Scan;

static int
any_nonzero(const unsigned char *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i])
            return 1;
    return 0;
}

/* Walk the records of data[start:min(size, limit)] (the file is `size` bytes). */
static void
scan(const unsigned char *data, Py_ssize_t size, Py_ssize_t start, Py_ssize_t limit,
     int check_crc, Scan *s)
{
    Py_ssize_t end = size < limit ? size : limit;
    Py_ssize_t pos = start;
    s->count = 0;
    s->last_ts = 0;
    s->reached_end = 0;
    s->problem = NONE;
    for (;;) {
        int64_t total, crc = 0, store_ts = 0, body_len = 0;
        int32_t sys_flag = 0;
        uint32_t magic;
        const unsigned char *r = data + pos;
        if (pos <= end - PREFIX_V4) {
            total = (int32_t)get_u32(r);
            magic = get_u32(r + 4);
            crc = (int32_t)get_u32(r + 8);
            sys_flag = (int32_t)get_u32(r + 36);
            store_ts = (int64_t)get_u64(r + 56);
            body_len = (int32_t)get_u32(r + 84);
        }
        else if (pos + 8 > end) {
            if (end == size)
                s->reached_end = 1;
            else if (any_nonzero(r, end - pos))
                s->problem = CUT_OFF;
            break;
        }
        else {
            total = (int32_t)get_u32(r);
            magic = get_u32(r + 4);
        }
        s->total = total;
        s->magic = magic;
        if (magic == BLANK_MAGIC) {
            if (total != size - pos)
                s->problem = BLANK_SHORT;
            else
                s->reached_end = 1;
            break;
        }
        if (total == 0 && magic == 0)
            break;
        if (magic != MAGIC_V1 && magic != MAGIC_V2) {
            s->problem = BAD_MAGIC;
            break;
        }
        if (total < MIN_RECORD || pos + total > end) {
            s->problem = NO_FIT;
            break;
        }
        /* (offsets within the record from here: a corrupt length must not make a pointer
         * past the buffer, not even to compare it) */
        Py_ssize_t body;
        if (sys_flag & (BORNHOST_V6_FLAG | STOREHOST_V6_FLAG)) {
            Py_ssize_t born = (sys_flag & BORNHOST_V6_FLAG) ? 20 : 8;
            store_ts = (int64_t)get_u64(r + 48 + born);
            Py_ssize_t p = 48 + born + 8 + ((sys_flag & STOREHOST_V6_FLAG) ? 20 : 8) + 12;
            if (p + 4 > total) {
                s->problem = LENGTHS;
                break;
            }
            body_len = (int32_t)get_u32(r + p);
            body = p + 4;
        }
        else
            body = PREFIX_V4;
        if (body_len < 0 || body + body_len + 3 > total) {
            s->problem = LENGTHS;
            break;
        }
        int64_t p = body + body_len;
        if (magic == MAGIC_V1)
            p += 1 + r[p];
        else
            p += 2 + (((int64_t)r[p] << 8) | r[p + 1]);
        if (p + 2 > total) {
            s->problem = LENGTHS;
            break;
        }
        int64_t props_len = (int16_t)((r[p] << 8) | r[p + 1]);
        if (props_len < 0 || p + 2 + props_len != total) {
            s->problem = LENGTHS;
            break;
        }
        if (check_crc && (int64_t)(crc32_of(r + body, (Py_ssize_t)body_len) & 0x7FFFFFFFu) != crc) {
            s->problem = CRC;
            break;
        }
        pos += total;
        s->count++;
        s->last_ts = store_ts;
    }
    s->pos = pos;
}

static PyObject *
problem_text(const Scan *s)
{
    char text[80];
    switch (s->problem) {
    case NONE:
        Py_RETURN_NONE;
    case CUT_OFF:
        return PyUnicode_FromString("record header cut off");
    case BLANK_SHORT:
        snprintf(text, sizeof text, "blank record of size %lld does not end the file",
                 (long long)s->total);
        break;
    case BAD_MAGIC:
        snprintf(text, sizeof text, "bad magic 0x%08X", (unsigned)s->magic);
        break;
    case NO_FIT:
        snprintf(text, sizeof text, "record size %lld does not fit", (long long)s->total);
        break;
    case LENGTHS:
        return PyUnicode_FromString("field lengths do not match TOTALSIZE");
    case CRC:
        return PyUnicode_FromString("body CRC mismatch");
    }
    return PyUnicode_FromString(text);
}

PyDoc_STRVAR(scan_records_doc,
"scan_records(data, size, start, check_crc, limit)\n"
"    -> (valid_end, reached_end, problem, records, last_store_timestamp)\n\n"
"Check the records of a CommitLog file's buffer `data` (the file is `size` bytes) from `start`\n"
"up to min(size, limit): each record's lengths against its TOTALSIZE and, if `check_crc`,\n"
"its body CRC. Returns where the good records end, whether a blank record or the file's end\n"
"was reached there, the problem found there (None for clean zeros), how many records were\n"
"good and the store timestamp of the last (storage.recovery._scan_pure).");

static PyObject *
scan_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "scan_records() takes 5 arguments");
        return NULL;
    }
    Py_ssize_t size, start, limit;
    if (ssize_arg(args[1], &size) < 0 || ssize_arg(args[2], &start) < 0
            || ssize_arg(args[4], &limit) < 0)
        return NULL;
    int check_crc = PyObject_IsTrue(args[3]);
    if (check_crc < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (size < 0 || size > view.len || start < 0 || start > size || limit < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "scan_records(): start, size or limit out of range");
        return NULL;
    }
    Scan s;
    Py_BEGIN_ALLOW_THREADS  /* (the buffer is held: its mapping cannot close meanwhile) */
    scan((const unsigned char *)view.buf, size, start, limit, check_crc, &s);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *problem = problem_text(&s);
    if (problem == NULL)
        return NULL;
    return Py_BuildValue("(nONnL)", s.pos, s.reached_end ? Py_True : Py_False, problem,
                         s.count, (long long)s.last_ts);
}

static PyMethodDef record_scan_methods[] = {
    {"scan_records", (PyCFunction)(void (*)(void))scan_records, METH_FASTCALL, scan_records_doc},
    {NULL, NULL, 0, NULL},
};

int
record_scan_add_functions(PyObject *module)
{
    return PyModule_AddFunctions(module, record_scan_methods);
}
