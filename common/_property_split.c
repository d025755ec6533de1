/*
 * common._storecore's split of a batch of RocketMQ property strings (k\x01v\x02k\x01v\x02...)
 * into the export's map column and the values of a few named properties, in one pass over the
 * bytes. Arrow's string kernels do the same in ~8 passes (split twice, filter, take keys and
 * values, compare keys once per name): the biggest share of the export's decoding of a record.
 * The pure twin, and the rules, are export.columnar's _property_map and _property: an entry is
 * a piece between \x02 separators holding a \x01; its key is what precedes the first \x01, its
 * value the rest; a piece without \x01 (the empty one after the last separator) is no entry;
 * when a key occurs twice in a row, only its last entry is kept (as RocketMQ's clients read
 * properties into a map). tests/unit/spark_export/test_columnar.py holds the two to the same
 * columns.
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

/* The next entry of a row from *at (before end): its key and value, *at moved past it; 0 when
 * the row has no more. Pieces without \x01 are skipped: they are no entry. */
static inline int
next_entry(const char **at, const char *end, const char **key, Py_ssize_t *key_len,
           const char **value, Py_ssize_t *value_len)
{
    const char *p = *at;
    while (p < end) {
        const char *stop = memchr(p, '\x02', (size_t)(end - p));
        const char *piece_end = stop == NULL ? end : stop;
        const char *split = memchr(p, '\x01', (size_t)(piece_end - p));
        const char *next = stop == NULL ? end : stop + 1;
        if (split != NULL) {
            *key = p;
            *key_len = split - p;
            *value = split + 1;
            *value_len = piece_end - split - 1;
            *at = next;
            return 1;
        }
        p = next;
    }
    *at = end;
    return 0;
}

typedef struct {
    const char *key, *value;
    Py_ssize_t key_len, value_len, index; /* index: its place in the row */
} Entry;

/* A row's entries, grown as rows need (one allocation for a whole batch, nearly always). */
typedef struct {
    Entry *entries;
    Py_ssize_t capacity;
} RowBuffer;

static int
same_key(const Entry *a, const Entry *b)
{
    return a->key_len == b->key_len && memcmp(a->key, b->key, (size_t)a->key_len) == 0;
}

static int
by_key_then_index(const void *left, const void *right)
{
    const Entry *a = left, *b = right;
    Py_ssize_t common = a->key_len < b->key_len ? a->key_len : b->key_len;
    int order = memcmp(a->key, b->key, (size_t)common);
    if (order == 0)
        order = (a->key_len > b->key_len) - (a->key_len < b->key_len);
    if (order == 0)
        order = (a->index > b->index) - (a->index < b->index);
    return order;
}

static int
by_index(const void *left, const void *right)
{
    const Entry *a = left, *b = right;
    return (a->index > b->index) - (a->index < b->index);
}

#define FEW_ENTRIES 32 /* up to this many, pairs are compared; past it, the row is sorted */

/* The entries of the row data[p:end) that count, in their order: a key named again later in
 * the row does not (RocketMQ's clients read properties into a map: the last value wins).
 * Their number, or -1 with MemoryError set. Rows hold a handful of entries, compared pair by
 * pair; a long row (a hostile one) is sorted instead, so no row costs quadratic time. */
static Py_ssize_t
row_entries(const char *p, const char *end, RowBuffer *row)
{
    Py_ssize_t n = 0;
    Entry e;
    while (next_entry(&p, end, &e.key, &e.key_len, &e.value, &e.value_len)) {
        if (n == row->capacity) {
            Py_ssize_t capacity = row->capacity * 2;
            Entry *grown = PyMem_Realloc(row->entries, (size_t)capacity * sizeof(Entry));
            if (grown == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            row->entries = grown;
            row->capacity = capacity;
        }
        e.index = n;
        row->entries[n++] = e;
    }
    Entry *entries = row->entries;
    Py_ssize_t kept = 0;
    if (n <= FEW_ENTRIES) {
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t j = i + 1;
            while (j < n && !same_key(&entries[i], &entries[j]))
                j++;
            if (j == n)
                entries[kept++] = entries[i];
        }
        return kept;
    }
    qsort(entries, (size_t)n, sizeof(Entry), by_key_then_index);
    for (Py_ssize_t i = 0; i < n; i++) /* the last of each run of one key */
        if (i + 1 == n || !same_key(&entries[i], &entries[i + 1]))
            entries[kept++] = entries[i];
    qsort(entries, (size_t)kept, sizeof(Entry), by_index);
    return kept;
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
    RowBuffer row = {PyMem_Malloc(FEW_ENTRIES * sizeof(Entry)), FEW_ENTRIES};
    if (row.entries == NULL) {
        PyErr_NoMemory();
        goto done;
    }
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
        Py_ssize_t m = row_entries(data + offset_at(row_at, i), data + offset_at(row_at, i + 1), &row);
        if (m < 0)
            goto done;
        for (Py_ssize_t j = 0; j < m; j++) {
            key_bytes += row.entries[j].key_len;
            value_bytes += row.entries[j].value_len;
        }
        entries += m;
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
        Py_ssize_t m = row_entries(data + offset_at(row_at, i), data + offset_at(row_at, i + 1), &row);
        if (m < 0)
            goto done;
        for (Py_ssize_t j = 0; j < m; j++) {
            const Entry *e = &row.entries[j];
            memcpy(kd + kat, e->key, (size_t)e->key_len);
            memcpy(vd + vat, e->value, (size_t)e->value_len);
            for (Py_ssize_t k = 0; k < name_count; k++)
                if (name_lengths[k] == e->key_len && memcmp(names[k], e->key, (size_t)e->key_len) == 0)
                    pick[k * n + i] = entry;
            kat += (int32_t)e->key_len;
            vat += (int32_t)e->value_len;
            entry++;
            ko[entry] = kat;
            vo[entry] = vat;
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
    PyMem_Free(row.entries);
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
