/*
 * common._storecore's cut of a batch of CommitLog records into the export's columns, in two
 * passes over the records (one to check them and size the columns, one to fill them) instead
 * of the ~25 numpy and Arrow steps of the pure twin, each a pass over the batch of its own:
 * the fixed fields in native order, the message ids in hex, the bodies and property strings
 * joined into Arrow value buffers, which bodies are UTF-8, the topic compared with the one
 * the queue holds, the hosts as codes into a short table of the distinct ones.
 *
 * The pure twin, and the rules, are export.columnar.ColumnarDecoder's numpy path: the same
 * checks in the same order (a body, topic or properties running past its record's size is
 * damage, reported by the record's CommitLog offset), the same values.
 * tests/unit/spark_export/test_columnar.py holds the two to the same batches.
 *
 * Layout (MESSAGE_MAGIC_CODE v1, IPv4 hosts): TOTALSIZE@0, MAGIC@4, QUEUEID@12, QUEUEOFFSET@20,
 * PHYSICALOFFSET@28, SYSFLAG@36, BORNTIMESTAMP@40, BORNHOST@48, STORETIMESTAMP@56,
 * STOREHOST@64, RECONSUMETIMES@72, BODYLENGTH@84, BODY@88, then TOPICLENGTH (1 byte), TOPIC,
 * PROPERTIESLENGTH (2 bytes), PROPERTIES.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_bytes.h"
#include "_record_cut.h"
#include "_vectors.h"

#define HEAD 88           /* everything up to the body */
#define MAGIC_V1 0xDAA320A7u
#define UNCUT_FLAGS 0x31  /* compressed (0x1), IPv6 born (0x10) or store (0x20) host */
#define HOSTS 64          /* distinct hosts a batch's table holds before giving up on codes */
/* storage.message.TIME_RANGE_MS: the stored times readers hold (years 1 to 9999) */
#define TIME_MIN_MS (-62135596800000LL)
#define TIME_MAX_MS 253402300799999LL

PyDoc_STRVAR(cut_doc,
"cut_records(data, starts, topic) -> dict | int\n\n"
"The records of `data` at `starts` (native int64s), every one a v1 record with IPv4 hosts and\n"
"an uncompressed body, as the export's columns: a dict of bytes in native order (queueId,\n"
"queueOffset, commitLogOffset, sysFlag, reconsumeTimes: the fields; bornTimestamp and\n"
"storeTimestamp: microseconds, the stored milliseconds clipped to what readers hold; msgId:\n"
"32 hex digits a row), body and properties: (int32 offsets, values), bodyText: (validity\n"
"bitmap, how many bodies are UTF-8), propertiesUtf8: bool, topic: None when every record\n"
"holds `topic` (bytes), else (offsets, values), bornHost and storeHost: (int32 codes into the\n"
"distinct hosts or None past 64 of them, the distinct ones, every row's) as big-endian\n"
"ip:port words held in native uint64s. An int instead when a record's body, topic or\n"
"properties run past its size: that record's CommitLog offset. ValueError for a record\n"
"outside the data or not in the form cut, OverflowError past 2 GiB of values.");

/* Whether p[0:n] is UTF-8 as Python and Arrow take it: no overlong forms, no surrogates,
 * nothing past U+10FFFF. ASCII is skipped eight bytes at a time. */
static int
is_utf8(const unsigned char *p, Py_ssize_t n)
{
    const unsigned char *end = p + n;
    while (p < end) {
        if (end - p >= 8) {
            uint64_t word;
            memcpy(&word, p, 8);
            if (!(word & 0x8080808080808080ULL)) {
                p += 8;
                continue;
            }
        }
        unsigned char c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        int size;
        unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
        if (c >= 0xC2 && c <= 0xDF) {
            size = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            size = 3;
            if (c == 0xE0)
                lo = 0xA0; /* no overlong forms */
            else if (c == 0xED)
                hi = 0x9F; /* no surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            size = 4;
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F; /* nothing past U+10FFFF */
        } else {
            return 0;
        }
        if (end - p < size || p[1] < lo || p[1] > hi)
            return 0;
        for (int k = 2; k < size; k++)
            if (p[k] < 0x80 || p[k] > 0xBF)
                return 0;
        p += size;
    }
    return 1;
}

/* The distinct hosts of a batch, a handful as a rule: the last found is tried first. */
typedef struct {
    uint64_t value[HOSTS];
    int count, last, full;
} HostTable;

static inline int32_t
host_code(HostTable *t, uint64_t value)
{
    if (t->count && t->value[t->last] == value)
        return t->last;
    for (int i = 0; i < t->count; i++) {
        if (t->value[i] == value) {
            t->last = i;
            return i;
        }
    }
    if (t->count == HOSTS) {
        t->full = 1;
        return -1;
    }
    t->value[t->count] = value;
    t->last = t->count;
    return t->count++;
}

static inline int64_t
clipped_micros(int64_t ms)
{
    return (ms < TIME_MIN_MS ? TIME_MIN_MS : ms > TIME_MAX_MS ? TIME_MAX_MS : ms) * 1000;
}

static inline void
put_hex(char *out, const unsigned char *p, int n)
{
    static const char digits[] = "0123456789ABCDEF";
    for (int i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
}

/* Where a record's parts lie, from its head; which check it fails (1-3), or 0. The three
 * checks are the pure twin's, in its order: body and topic length, properties length, the
 * properties themselves. */
typedef struct {
    int64_t body, body_len, topic, topic_len, props, props_len;
} Parts;

static int
locate(const unsigned char *d, Py_ssize_t len, int64_t s, Parts *r)
{
    int64_t end = s + (int32_t)get_u32(d + s);
    r->body = s + HEAD;
    r->body_len = (int32_t)get_u32(d + s + 84);
    int64_t topic_at = r->body + r->body_len;
    if (r->body_len < 0 || topic_at + 1 > end || end > len)
        return 1;
    r->topic = topic_at + 1;
    r->topic_len = d[topic_at];
    int64_t props_at = r->topic + r->topic_len;
    if (props_at + 2 > end)
        return 2;
    r->props = props_at + 2;
    r->props_len = ((int64_t)d[props_at] << 8) | d[props_at + 1];
    if (r->props + r->props_len > end)
        return 3;
    return 0;
}

/* A bytes object of `size` to fill, kept in `keep` (released on any failure). */
static char *
new_bytes(PyObject **keep, Py_ssize_t size)
{
    *keep = PyBytes_FromStringAndSize(NULL, size);
    return *keep == NULL ? NULL : PyBytes_AS_STRING(*keep);
}

enum { Q_ID, Q_OFFSET, PHY, SYS, BORN_TS, STORE_TS, RECONSUME, MSG_ID, BODY_OFF, BODY, TEXT,
       PROPS_OFF, PROPS, TOPIC_OFF, TOPIC, BORN_CODES, BORN_SEEN, BORN_ALL, STORE_CODES,
       STORE_SEEN, STORE_ALL, OUTPUTS };

/* result[key] = value, taking the new reference `value`; -1 when it is NULL (its maker's
 * error set) or the dict refuses it. */
static int
put_new(PyObject *result, const char *key, PyObject *value)
{
    if (value == NULL)
        return -1;
    int failed = PyDict_SetItemString(result, key, value);
    Py_DECREF(value);
    return failed;
}

/* The dict cut_records returns, from `out` (borrowed: the caller drops them). Each step runs
 * only while the ones before succeeded, so no call is made with an error pending. */
static PyObject *
columns(PyObject **out, Py_ssize_t valid, int props_utf8, const HostTable *born,
        const HostTable *store)
{
    PyObject *result = PyDict_New();
    if (result == NULL)
        return NULL;
    const char *fixed[] = {"queueId", "queueOffset", "commitLogOffset", "sysFlag",
                           "bornTimestamp", "storeTimestamp", "reconsumeTimes", "msgId"};
    int failed = 0;
    for (int i = Q_ID; i <= MSG_ID && !failed; i++)
        failed = PyDict_SetItemString(result, fixed[i], out[i]);
    failed = failed || put_new(result, "body", PyTuple_Pack(2, out[BODY_OFF], out[BODY]));
    failed = failed || put_new(result, "bodyText", Py_BuildValue("(On)", out[TEXT], valid));
    failed = failed || put_new(result, "properties", PyTuple_Pack(2, out[PROPS_OFF], out[PROPS]));
    failed = failed || PyDict_SetItemString(result, "propertiesUtf8",
                                            props_utf8 ? Py_True : Py_False);
    failed = failed || put_new(result, "topic",
                               out[TOPIC] == NULL ? Py_NewRef(Py_None)
                                                  : PyTuple_Pack(2, out[TOPIC_OFF], out[TOPIC]));
    failed = failed || put_new(result, "bornHost",
                               PyTuple_Pack(3, born->full ? Py_None : out[BORN_CODES],
                                            out[BORN_SEEN], out[BORN_ALL]));
    failed = failed || put_new(result, "storeHost",
                               PyTuple_Pack(3, store->full ? Py_None : out[STORE_CODES],
                                            out[STORE_SEEN], out[STORE_ALL]));
    if (failed)
        Py_CLEAR(result);
    return result;
}

static PyObject *
cut_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "cut_records() takes 3 arguments");
        return NULL;
    }
    Py_buffer data, starts, topic;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0)
        return NULL;
    if (int64_vector(args[1], &starts, "cut_records() needs int64 starts") < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    if (PyObject_GetBuffer(args[2], &topic, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&starts);
        PyBuffer_Release(&data);
        return NULL;
    }
    PyObject *out[OUTPUTS] = {NULL};
    PyObject *result = NULL;
    Parts *parts = NULL;
    const unsigned char *d = (const unsigned char *)data.buf;
    const Py_ssize_t len = data.len;
    const char *start = (const char *)starts.buf; /* (any alignment: int64_at) */
    const Py_ssize_t n = starts.len / 8;
    if (n > PY_SSIZE_T_MAX / 32 - 1) { /* (the widest column, 32 bytes a row, must be sizable) */
        PyErr_SetString(PyExc_OverflowError, "cut_records(): too many records");
        goto done;
    }
    /* Each record's parts as pass 1 read and checked them: pass 2 copies by these, never by
     * a second read of the lengths, which another process may be changing (a store file
     * mapped while its broker runs). */
    parts = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Parts));
    if (parts == NULL) {
        PyErr_NoMemory();
        goto done;
    }

    /* Pass 1: every record in the form cut, its parts within it; the columns' sizes. */
    Py_ssize_t first_bad[3] = {-1, -1, -1};
    int64_t body_total = 0, props_total = 0, topic_total = 0;
    int same_topic = topic.len > 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s = int64_at(start, i);
        if (s < 0 || s > (int64_t)len - HEAD) {
            PyErr_Format(PyExc_ValueError, "cut_records(): record %zd lies outside the data", i);
            goto done;
        }
        if (get_u32(d + s + 4) != MAGIC_V1 || (get_u32(d + s + 36) & UNCUT_FLAGS)) {
            PyErr_Format(PyExc_ValueError, "cut_records(): record %zd is not in the form cut", i);
            goto done;
        }
        Parts *r = &parts[i];
        int bad = locate(d, len, s, r);
        if (bad) {
            if (first_bad[bad - 1] < 0)
                first_bad[bad - 1] = i;
            continue;
        }
        body_total += r->body_len;
        props_total += r->props_len;
        topic_total += r->topic_len;
        if (same_topic && (r->topic_len != topic.len
                           || memcmp(d + r->topic, topic.buf, (size_t)topic.len)))
            same_topic = 0;
    }
    for (int k = 0; k < 3; k++) {
        if (first_bad[k] >= 0) {
            result = PyLong_FromLongLong((long long)get_u64(d + int64_at(start, first_bad[k]) + 28));
            goto done;
        }
    }
    if (body_total >= ((int64_t)1 << 31) || props_total >= ((int64_t)1 << 31)
        || (!same_topic && topic_total >= ((int64_t)1 << 31))) {
        PyErr_SetString(PyExc_OverflowError, "a batch of more than 2 GiB of values");
        goto done;
    }

    /* Pass 2: the columns. */
    Py_ssize_t sizes[OUTPUTS] = {0}; /* (the tables, BORN_SEEN and STORE_SEEN, come last) */
    sizes[Q_ID] = sizes[SYS] = sizes[RECONSUME] = sizes[BORN_CODES] = sizes[STORE_CODES] = 4 * n;
    sizes[Q_OFFSET] = sizes[PHY] = sizes[BORN_TS] = sizes[STORE_TS] = 8 * n;
    sizes[BORN_ALL] = sizes[STORE_ALL] = 8 * n;
    sizes[MSG_ID] = 32 * n;
    sizes[BODY_OFF] = sizes[PROPS_OFF] = sizes[TOPIC_OFF] = 4 * (n + 1);
    sizes[BODY] = (Py_ssize_t)body_total;
    sizes[PROPS] = (Py_ssize_t)props_total;
    sizes[TOPIC] = (Py_ssize_t)topic_total;
    sizes[TEXT] = (n + 7) / 8;
    char *w[OUTPUTS] = {NULL};
    for (int k = 0; k < OUTPUTS; k++) {
        if (k == BORN_SEEN || k == STORE_SEEN || (same_topic && (k == TOPIC_OFF || k == TOPIC)))
            continue; /* (the tables are known at the end; no topic column is cut) */
        if ((w[k] = new_bytes(&out[k], sizes[k])) == NULL)
            goto done;
    }
    memset(w[TEXT], 0, (size_t)sizes[TEXT]);
    int32_t *queue_id = (int32_t *)w[Q_ID], *sys_flag = (int32_t *)w[SYS];
    int32_t *reconsume = (int32_t *)w[RECONSUME];
    int32_t *body_off = (int32_t *)w[BODY_OFF], *props_off = (int32_t *)w[PROPS_OFF];
    int32_t *topic_off = (int32_t *)w[TOPIC_OFF];
    int32_t *born_code = (int32_t *)w[BORN_CODES], *store_code = (int32_t *)w[STORE_CODES];
    int64_t *queue_offset = (int64_t *)w[Q_OFFSET], *phy = (int64_t *)w[PHY];
    int64_t *born_ts = (int64_t *)w[BORN_TS], *store_ts = (int64_t *)w[STORE_TS];
    uint64_t *born_all = (uint64_t *)w[BORN_ALL], *store_all = (uint64_t *)w[STORE_ALL];
    unsigned char *text = (unsigned char *)w[TEXT];
    char *body = w[BODY], *props = w[PROPS], *topics = w[TOPIC], *msg_id = w[MSG_ID];
    HostTable born = {.count = 0}, store = {.count = 0};
    Py_ssize_t valid = 0;
    int props_utf8 = 1;
    int32_t body_at = 0, props_at = 0, topic_at = 0;
    body_off[0] = props_off[0] = 0;
    if (topic_off != NULL)
        topic_off[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *h = d + int64_at(start, i);
        const Parts r = parts[i];
        queue_id[i] = (int32_t)get_u32(h + 12);
        queue_offset[i] = (int64_t)get_u64(h + 20);
        phy[i] = (int64_t)get_u64(h + 28);
        sys_flag[i] = (int32_t)get_u32(h + 36);
        born_ts[i] = clipped_micros((int64_t)get_u64(h + 40));
        store_ts[i] = clipped_micros((int64_t)get_u64(h + 56));
        reconsume[i] = (int32_t)get_u32(h + 72);
        put_hex(msg_id + 32 * i, h + 64, 8); /* store host, then the CommitLog offset */
        put_hex(msg_id + 32 * i + 16, h + 28, 8);
        born_all[i] = get_u64(h + 48);
        store_all[i] = get_u64(h + 64);
        born_code[i] = host_code(&born, born_all[i]);
        store_code[i] = host_code(&store, store_all[i]);
        memcpy(body + body_at, d + r.body, (size_t)r.body_len);
        if (is_utf8((const unsigned char *)body + body_at, r.body_len)) { /* (the copy handed on) */
            text[i >> 3] |= (unsigned char)(1u << (i & 7));
            valid++;
        }
        body_off[i + 1] = body_at += (int32_t)r.body_len;
        memcpy(props + props_at, d + r.props, (size_t)r.props_len);
        props_utf8 = props_utf8 && is_utf8((const unsigned char *)props + props_at, r.props_len);
        props_off[i + 1] = props_at += (int32_t)r.props_len;
        if (topics != NULL) {
            memcpy(topics + topic_at, d + r.topic, (size_t)r.topic_len);
            topic_off[i + 1] = topic_at += (int32_t)r.topic_len;
        }
    }
    out[BORN_SEEN] = PyBytes_FromStringAndSize((const char *)born.value, 8 * (Py_ssize_t)born.count);
    if (out[BORN_SEEN] == NULL)
        goto done;
    out[STORE_SEEN] = PyBytes_FromStringAndSize((const char *)store.value, 8 * (Py_ssize_t)store.count);
    if (out[STORE_SEEN] != NULL)
        result = columns(out, valid, props_utf8, &born, &store);
done:
    PyMem_Free(parts);
    for (int k = 0; k < OUTPUTS; k++)
        Py_XDECREF(out[k]);
    PyBuffer_Release(&topic);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&data);
    return result;
}

static PyMethodDef record_cut_methods[] = {
    {"cut_records", (PyCFunction)(void (*)(void))cut_records, METH_FASTCALL, cut_doc},
    {NULL, NULL, 0, NULL},
};

int
record_cut_add_functions(PyObject *module)
{
    return PyModule_AddFunctions(module, record_cut_methods);
}
