/*
 * common._storecore's split of a batch of RocketMQ property strings (k\x01v\x02k\x01v\x02...)
 * into the export's map column and the values of a few named properties, in one pass over the
 * bytes. Arrow's string kernels do the same in ~8 passes (split twice, filter, take keys and
 * values, compare keys once per name): the biggest share of the export's decoding of a record.
 * The pure twin, and the rules, are export.columnar's _property_map and _property: an entry is
 * a piece between \x02 separators holding a \x01; its key is what precedes the first \x01, its
 * value the rest; a piece without \x01 (the empty one after the last separator) is no entry;
 * when a name occurs twice in a row, its last entry counts. tests/unit/spark_export/
 * test_columnar.py holds the two to the same columns.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_property_split.h"

#define MAX_NAMES 8

PyDoc_STRVAR(split_doc,
"split_properties(offsets, data, names) -> (map_offsets, key_offsets, key_data,\n"
"                                           value_offsets, value_data, picks)\n\n"
"The n property strings of an Arrow string column (offsets: n + 1 native int32, data: their\n"
"bytes) as a map column's buffers: int32 entry offsets a row, then the keys' and the values'\n"
"int32 offsets and bytes. picks holds, for each of `names` (a tuple of bytes, at most 8), n\n"
"native int32: the entry index of that key in each row, or -1. ValueError for offsets that\n"
"do not describe data, OverflowError past 2 GiB of keys or values.");

/* The i-th int32 of an offsets buffer, which need not be aligned (a view into other bytes). */
static inline int32_t
offset_at(const char *offsets, Py_ssize_t i)
{
    int32_t value;
    memcpy(&value, offsets + i * (Py_ssize_t)sizeof(int32_t), sizeof value);
    return value;
}

/* One entry of data[begin:end) (a piece between separators): its \x01, or NULL if it has none. */
static inline const char *
entry_split(const char *begin, const char *end)
{
    return memchr(begin, '\x01', (size_t)(end - begin));
}

static PyObject *
split_properties(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3 || !PyTuple_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "split_properties(offsets, data, names: tuple)");
        return NULL;
    }
    Py_ssize_t name_count = PyTuple_GET_SIZE(args[2]);
    if (name_count > MAX_NAMES) {
        PyErr_SetString(PyExc_ValueError, "split_properties(): at most 8 names");
        return NULL;
    }
    const char *names[MAX_NAMES];
    Py_ssize_t name_lengths[MAX_NAMES];
    for (Py_ssize_t k = 0; k < name_count; k++) {
        PyObject *name = PyTuple_GET_ITEM(args[2], k);
        if (!PyBytes_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "split_properties(): names are bytes");
            return NULL;
        }
        names[k] = PyBytes_AS_STRING(name);
        name_lengths[k] = PyBytes_GET_SIZE(name);
    }
    Py_buffer offsets_view, data_view;
    if (PyObject_GetBuffer(args[0], &offsets_view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &data_view, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&offsets_view);
        return NULL;
    }
    PyObject *map_offsets = NULL, *key_offsets = NULL, *key_data = NULL, *value_offsets = NULL;
    PyObject *value_data = NULL, *picks = NULL, *result = NULL;
    const char *row_at = (const char *)offsets_view.buf;
    const char *data = (const char *)data_view.buf;
    Py_ssize_t n = offsets_view.len / (Py_ssize_t)sizeof(int32_t) - 1;
    if (n < 0 || offsets_view.len % (Py_ssize_t)sizeof(int32_t) != 0) {
        PyErr_SetString(PyExc_ValueError, "split_properties(): offsets are n + 1 int32");
        goto done;
    }
    if (offset_at(row_at, 0) < 0 || offset_at(row_at, n) > data_view.len) {
        PyErr_SetString(PyExc_ValueError, "split_properties(): offsets outside the data");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) { /* every row within the data before a byte is read */
        if (offset_at(row_at, i + 1) < offset_at(row_at, i)) {
            PyErr_SetString(PyExc_ValueError, "split_properties(): offsets go backwards");
            goto done;
        }
    }
    /* First pass: count the entries and the keys' and values' bytes. */
    int64_t entries = 0, key_bytes = 0, value_bytes = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *p = data + offset_at(row_at, i), *end = data + offset_at(row_at, i + 1);
        while (p < end) {
            const char *stop = memchr(p, '\x02', (size_t)(end - p));
            const char *piece_end = stop == NULL ? end : stop;
            const char *split = entry_split(p, piece_end);
            if (split != NULL) {
                entries++;
                key_bytes += split - p;
                value_bytes += piece_end - split - 1;
            }
            p = stop == NULL ? end : stop + 1;
        }
    }
    if (entries >= INT32_MAX || key_bytes >= INT32_MAX || value_bytes >= INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a batch of more than 2 GiB of properties");
        goto done;
    }
    map_offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * (Py_ssize_t)sizeof(int32_t));
    key_offsets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(entries + 1) * (Py_ssize_t)sizeof(int32_t));
    value_offsets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(entries + 1) * (Py_ssize_t)sizeof(int32_t));
    key_data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)key_bytes);
    value_data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)value_bytes);
    picks = PyBytes_FromStringAndSize(NULL, name_count * n * (Py_ssize_t)sizeof(int32_t));
    if (map_offsets == NULL || key_offsets == NULL || value_offsets == NULL || key_data == NULL
            || value_data == NULL || picks == NULL)
        goto done;
    int32_t *mo = (int32_t *)PyBytes_AS_STRING(map_offsets);
    int32_t *ko = (int32_t *)PyBytes_AS_STRING(key_offsets);
    int32_t *vo = (int32_t *)PyBytes_AS_STRING(value_offsets);
    char *kd = PyBytes_AS_STRING(key_data), *vd = PyBytes_AS_STRING(value_data);
    int32_t *pick = (int32_t *)PyBytes_AS_STRING(picks);
    for (Py_ssize_t j = 0; j < name_count * n; j++)
        pick[j] = -1;
    /* Second pass: copy the keys and values out, note the named ones. */
    int32_t entry = 0, kat = 0, vat = 0;
    mo[0] = ko[0] = vo[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *p = data + offset_at(row_at, i), *end = data + offset_at(row_at, i + 1);
        while (p < end) {
            const char *stop = memchr(p, '\x02', (size_t)(end - p));
            const char *piece_end = stop == NULL ? end : stop;
            const char *split = entry_split(p, piece_end);
            if (split != NULL) {
                Py_ssize_t klen = split - p, vlen = piece_end - split - 1;
                memcpy(kd + kat, p, (size_t)klen);
                memcpy(vd + vat, split + 1, (size_t)vlen);
                for (Py_ssize_t k = 0; k < name_count; k++)
                    if (name_lengths[k] == klen && memcmp(names[k], p, (size_t)klen) == 0)
                        pick[k * n + i] = entry;
                kat += (int32_t)klen;
                vat += (int32_t)vlen;
                entry++;
                ko[entry] = kat;
                vo[entry] = vat;
            }
            p = stop == NULL ? end : stop + 1;
        }
        mo[i + 1] = entry;
    }
    result = PyTuple_Pack(6, map_offsets, key_offsets, key_data, value_offsets, value_data, picks);
done:
    Py_XDECREF(map_offsets);
    Py_XDECREF(key_offsets);
    Py_XDECREF(key_data);
    Py_XDECREF(value_offsets);
    Py_XDECREF(value_data);
    Py_XDECREF(picks);
    PyBuffer_Release(&data_view);
    PyBuffer_Release(&offsets_view);
    return result;
}

static PyMethodDef property_split_methods[] = {
    {"split_properties", (PyCFunction)(void (*)(void))split_properties, METH_FASTCALL, split_doc},
    {NULL, NULL, 0, NULL},
};

int
property_split_add_functions(PyObject *module)
{
    return PyModule_AddFunctions(module, property_split_methods);
}
