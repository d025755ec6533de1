/*
 * common._storecore: the compiled core of the message store's per-record work.
 *
 * The CommitLog record layout, ConsumeQueue dispatch's property scan and the index's slot and
 * entry writes, in C. Each function has a pure-Python twin that stays the reference
 * (storage/record.py, storage/message.py, storage/index_file.py); common/speedups.py decides
 * which one runs. The contract, checked by tests/unit/storage/test_storecore.py with hypothesis:
 *
 *   - every result is exactly what the pure function computes, and every byte written is the
 *     byte the pure function writes;
 *   - a function returns None, having written nothing, for anything it does not reproduce
 *     exactly (a record that will not decode, text that is not UTF-8, an index file without
 *     room for every key): the caller then runs the pure function, which handles the case or
 *     raises its precise error.
 *
 * Records are read from files and from peers (a slave's replicated bytes, a pull result): every
 * read is bounds-checked against the buffer's end. Plain C99 and the CPython C API only.
 *
 * The record (big-endian; hosts are 4+4 bytes, or 16+4 with the sysFlag's V6 bits):
 *
 *   TOTALSIZE i32 | MAGICCODE u32 | BODYCRC i32 | QUEUEID i32 | FLAG i32 | QUEUEOFFSET i64 |
 *   PHYSICALOFFSET i64 | SYSFLAG i32 | BORNTIMESTAMP i64 | BORNHOST 8/20 | STORETIMESTAMP i64 |
 *   STOREHOST 8/20 | RECONSUMETIMES i32 | PREPARED TX OFFSET i64 | BODYLEN i32 | BODY |
 *   TOPICLEN i8 (v1) or i16 (v2) | TOPIC | PROPERTIESLEN i16 | PROPERTIES
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "_populator.h"
#include "_range_sync.h"
#include "_put_counter.h"
#include "_bytes.h"
#include "_index_entry.h"
#include "_properties.h"
#include "_dispatch_one.h"
#include "_dispatch_run.h"
#include "_pull_gather.h"
#include "_record_scan.h"
#include "_batch_body.h"
#include "_property_split.h"
#include "_record_cut.h"
#include "_record.h"
#include "_crc32.h"
#include "_file_write.h"
#include "_append.h"
#include "_text.h"
#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif

/* A Python int that fits a signed field of `bits` bits; -1 with ValueError set when it does not
 * (struct.error in the pure twin: either way the put path has checked every value before). */
static int
int_field(PyObject *value, int bits, int64_t *out)
{
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow || (bits == 32 && (v < INT32_MIN || v > INT32_MAX))) {
        PyErr_Format(PyExc_ValueError, "%R does not fit a %d-bit record field", value, bits);
        return -1;
    }
    *out = v;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* encode_record_into                                                                           */

PyDoc_STRVAR(encode_record_into_doc,
"encode_record_into(target, pos, crc, queue_id, flag, queue_offset, physical_offset, sys_flag,\n"
"                   born_timestamp, born_host, store_timestamp, store_host, reconsume_times,\n"
"                   prepared_transaction_offset, body, topic, properties) -> int\n\n"
"Write one v1 record into the writable buffer `target` at `pos`; returns its TOTALSIZE\n"
"(storage.record.encode_record_into_pure). Raises ValueError, writing nothing, when a value\n"
"does not fit its field or the record does not fit the buffer.");

#define ENCODE_ARGS 17

static PyObject *
encode_record_into(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != ENCODE_ARGS) {
        PyErr_Format(PyExc_TypeError, "encode_record_into() takes %d arguments (%zd given)",
                     ENCODE_ARGS, nargs);
        return NULL;
    }
    int64_t pos, crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts, store_ts;
    int64_t reconsume, prepared;
    if (int_field(args[1], 64, &pos) < 0 || int_field(args[2], 32, &crc) < 0
        || int_field(args[3], 32, &queue_id) < 0 || int_field(args[4], 32, &flag) < 0
        || int_field(args[5], 64, &queue_offset) < 0 || int_field(args[6], 64, &physical_offset) < 0
        || int_field(args[7], 32, &sys_flag) < 0 || int_field(args[8], 64, &born_ts) < 0
        || int_field(args[10], 64, &store_ts) < 0 || int_field(args[12], 32, &reconsume) < 0
        || int_field(args[13], 64, &prepared) < 0)
        return NULL;
    PyObject *born_host = args[9], *store_host = args[11], *topic = args[15], *props = args[16];
    if (!PyBytes_Check(born_host) || !PyBytes_Check(store_host) || !PyBytes_Check(topic)
        || !PyBytes_Check(props)) {
        PyErr_SetString(PyExc_TypeError, "hosts, topic and properties must be bytes");
        return NULL;
    }
    Py_ssize_t born_len = PyBytes_GET_SIZE(born_host), store_len = PyBytes_GET_SIZE(store_host);
    Py_ssize_t topic_len = PyBytes_GET_SIZE(topic), props_len = PyBytes_GET_SIZE(props);
    if ((born_len != 8 && born_len != 20) || (store_len != 8 && store_len != 20)) {
        PyErr_SetString(PyExc_ValueError, "a host is 8 or 20 bytes");
        return NULL;
    }
    if (topic_len > 127 || props_len > 32767) {
        PyErr_SetString(PyExc_ValueError, "the topic or the properties are too long for a record");
        return NULL;
    }
    Py_buffer body;
    if (PyObject_GetBuffer(args[14], &body, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&body);
        return NULL;
    }
    PyObject *result = NULL;
    int64_t total = 72 + born_len + store_len + (int64_t)body.len + 1 + topic_len + 2 + props_len;
    if (body.len > INT32_MAX || total > INT32_MAX || pos < 0 || pos > (int64_t)view.len
        || total > (int64_t)view.len - pos) {
        PyErr_SetString(PyExc_ValueError, "the record does not fit the buffer");
        goto done;
    }
    RecordHead head = {
        total, crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts, store_ts,
        reconsume, prepared,
        (const unsigned char *)PyBytes_AS_STRING(born_host),
        (const unsigned char *)PyBytes_AS_STRING(store_host), (const unsigned char *)body.buf,
        (const unsigned char *)PyBytes_AS_STRING(topic),
        born_len, store_len, body.len, topic_len, props_len,
    };
    unsigned char *p = write_record_head((unsigned char *)view.buf + pos, &head);
    memcpy(p, PyBytes_AS_STRING(props), (size_t)props_len);
    result = PyLong_FromLongLong(total);
done:
    PyBuffer_Release(&view);
    PyBuffer_Release(&body);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* decode_record_fields                                                                         */

PyDoc_STRVAR(decode_record_fields_doc,
"decode_record_fields(buf, pos, read_body) -> tuple | None\n\n"
"The 17 fields of the whole, well-formed message record at buf[pos], in MessageRecord's order\n"
"(the body is b'' unless `read_body`), or None for anything else: a blank or end-of-data\n"
"marker, a torn or corrupt record, text that is not UTF-8. The body CRC is not checked.");

static PyObject *
decode_record_fields(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "decode_record_fields() takes 3 arguments");
        return NULL;
    }
    Py_ssize_t pos;
    if (ssize_arg(args[1], &pos) < 0)
        return NULL;
    int read_body = PyObject_IsTrue(args[2]);
    if (read_body < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL;
    PyObject *born = NULL, *store = NULL, *body = NULL, *topic = NULL, *props = NULL;
    const unsigned char *base = (const unsigned char *)view.buf;
    Py_ssize_t limit = view.len;
    if (pos < 0 || pos > limit - 8)
        goto none;
    const unsigned char *r = base + pos;
    int64_t total = (int32_t)get_u32(r);
    uint32_t magic = get_u32(r + 4);
    if ((magic != MAGIC_V1 && magic != MAGIC_V2) || total < MIN_RECORD || total > limit - pos)
        goto none;
    const unsigned char *end = r + total;
    int32_t sys_flag = (int32_t)get_u32(r + 36);
    Py_ssize_t born_len = (sys_flag & BORNHOST_V6_FLAG) ? 20 : 8;
    Py_ssize_t store_len = (sys_flag & STOREHOST_V6_FLAG) ? 20 : 8;
    const unsigned char *p = r + 48;
    if (born_len + 8 + store_len + 16 + 3 > end - p)
        goto none;
    const unsigned char *born_at = p;
    p += born_len;
    int64_t store_ts = (int64_t)get_u64(p);
    p += 8;
    const unsigned char *store_at = p;
    p += store_len;
    int32_t reconsume = (int32_t)get_u32(p);
    int64_t prepared = (int64_t)get_u64(p + 4);
    int32_t body_len = (int32_t)get_u32(p + 12);
    p += 16;
    Py_ssize_t topic_prefix = magic == MAGIC_V1 ? 1 : 2;
    if (body_len < 0 || body_len + topic_prefix + 2 > end - p)
        goto none;
    const unsigned char *body_at = p;
    p += body_len;
    Py_ssize_t topic_len;
    if (magic == MAGIC_V1) {
        topic_len = *p++;
        if (topic_len > 127)
            goto none;
    }
    else {
        topic_len = ((Py_ssize_t)p[0] << 8) | p[1];
        p += 2;
    }
    if (topic_len + 2 > end - p)
        goto none;
    const unsigned char *topic_at = p;
    p += topic_len;
    Py_ssize_t props_len = (int16_t)(((uint16_t)p[0] << 8) | p[1]);
    p += 2;
    if (props_len < 0 || props_len > end - p)
        goto none;
    const unsigned char *props_at = p;
    p += props_len;
    if (p != end)
        goto none;
    topic = decode_text(topic_at, topic_len);
    if (topic == NULL)
        goto error_or_none;
    props = decode_text(props_at, props_len);
    if (props == NULL)
        goto error_or_none;
    born = PyBytes_FromStringAndSize((const char *)born_at, born_len);
    store = PyBytes_FromStringAndSize((const char *)store_at, store_len);
    body = PyBytes_FromStringAndSize(read_body ? (const char *)body_at : "", read_body ? body_len : 0);
    if (born == NULL || store == NULL || body == NULL)
        goto error;
    result = Py_BuildValue(
        "(LkiiiLLiLNLNiLNNN)",
        (long long)total, (unsigned long)magic, (int)(int32_t)get_u32(r + 8),
        (int)(int32_t)get_u32(r + 12), (int)(int32_t)get_u32(r + 16),
        (long long)(int64_t)get_u64(r + 20), (long long)(int64_t)get_u64(r + 28), (int)sys_flag,
        (long long)(int64_t)get_u64(r + 40), born, (long long)store_ts, store, (int)reconsume,
        (long long)prepared, body, topic, props);
    /* "N" stole the references, or released them if building the tuple failed. */
    PyBuffer_Release(&view);
    return result;
error_or_none:
    if (PyErr_Occurred())
        goto error;
none:
    Py_XDECREF(topic);
    Py_XDECREF(props);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    Py_XDECREF(born);
    Py_XDECREF(store);
    Py_XDECREF(body);
    Py_XDECREF(topic);
    Py_XDECREF(props);
    PyBuffer_Release(&view);
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* dispatch_properties                                                                          */

PyDoc_STRVAR(dispatch_properties_doc,
"dispatch_properties(text) -> (tags, keys, uniq_key, delay) | None\n\n"
"What dispatch reads from a properties string, in one pass: the values of TAGS, KEYS,\n"
"UNIQ_KEY and DELAY, each as storage.message.property_from_string finds it (the last\n"
"non-empty occurrence wins) or None; None for text that cannot be read as UTF-8.");

static PyObject *
dispatch_properties(PyObject *module, PyObject *text)
{
    (void)module;
    Py_ssize_t n;
    const char *s = utf8_arg(text, "dispatch_properties", &n);
    if (s == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE; /* a lone surrogate: the pure scan copes with it */
    }
    static const char *const names[4] = {"TAGS", "KEYS", "UNIQ_KEY", "DELAY"};
    static const Py_ssize_t name_lengths[4] = {4, 4, 8, 5};
    const char *found[4];
    Py_ssize_t found_len[4];
    scan_properties(s, n, 4, names, name_lengths, found, found_len);
    PyObject *result = PyTuple_New(4);
    if (result == NULL)
        return NULL;
    for (int i = 0; i < 4; i++) {
        PyObject *value;
        if (found[i] == NULL) {
            value = Py_None;
            Py_INCREF(value);
        }
        else {
            value = PyUnicode_DecodeUTF8(found[i], found_len[i], "strict");
            if (value == NULL) {
                Py_DECREF(result);
                return NULL;
            }
        }
        PyTuple_SET_ITEM(result, i, value);
    }
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* properties_normalized                                                                        */

PyDoc_STRVAR(properties_normalized_doc,
"properties_normalized(text) -> bool\n\n"
"Whether parsing `text` as properties and writing them back gives `text` again\n"
"(storage.message.properties_normalized_pure): pairs 'name\\x01value\\x02' with a name and a\n"
"value, no name twice. False for anything else, and for over 64 pairs.");

static PyObject *
properties_normalized(PyObject *module, PyObject *text)
{
    (void)module;
    Py_ssize_t n;
    const char *s = utf8_arg(text, "properties_normalized", &n);
    if (s == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_FALSE; /* a lone surrogate: not what a client sends; the slow path copes */
    }
    return PyBool_FromLong(normalized_properties(s, n));
}

/* ------------------------------------------------------------------------------------------ */
/* index_put_keys                                                                               */


/* The index's non-negative hash of topic#key: Java's hashCode continued from `seed` (the hash
 * of "topic#") over the UTF-16 units of text[begin:end], then abs with MIN_VALUE as 0. Returns
 * -1 for a lone surrogate (the pure hash refuses it). */
static int64_t
index_hash(int kind, const void *data, Py_ssize_t begin, Py_ssize_t end, uint32_t seed)
{
    uint32_t h = seed;
    for (Py_ssize_t i = begin; i < end; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c < 0x10000) {
            if (c >= 0xD800 && c <= 0xDFFF)
                return -1;
            h = 31 * h + c;
        }
        else {
            c -= 0x10000;
            h = 31 * h + (0xD800 + (c >> 10));
            h = 31 * h + (0xDC00 + (c & 0x3FF));
        }
    }
    return index_key_hash_of(h);
}

#define MAX_KEYS 1024

PyDoc_STRVAR(index_put_keys_doc,
"index_put_keys(buf, hash_slot_num, index_num, index_count, seed, uniq_key, keys,\n"
"               phy_offset, time_diff) -> (index_count, new_slots) | None\n\n"
"Index one message in an index file's mapping: its UNIQ_KEY, then each non-empty\n"
"space-separated KEYS value, as storage.index_file.IndexFile.put_key_hash does key by key\n"
"(the header is the caller's). Returns the new entry count and how many empty slots were\n"
"filled, or None, writing nothing, when the file has no room for every key or a key cannot\n"
"be hashed.");

static PyObject *
index_put_keys(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "index_put_keys() takes 9 arguments");
        return NULL;
    }
    int64_t hash_slot_num, index_num, index_count, seed, phy_offset, time_diff;
    if (int_field(args[1], 32, &hash_slot_num) < 0 || int_field(args[2], 32, &index_num) < 0
        || int_field(args[3], 32, &index_count) < 0 || int_field(args[4], 64, &seed) < 0
        || int_field(args[7], 64, &phy_offset) < 0 || int_field(args[8], 32, &time_diff) < 0)
        return NULL;
    if (hash_slot_num <= 0 || index_count < 1) {
        PyErr_SetString(PyExc_ValueError, "an index file has slots and counts entries from 1");
        return NULL;
    }
    PyObject *texts[2] = {args[5], args[6]};
    /* (text, begin, end) of every key, in the order the pure path indexes them. */
    PyObject *key_text[MAX_KEYS];
    Py_ssize_t key_begin[MAX_KEYS], key_end[MAX_KEYS];
    int64_t key_hash[MAX_KEYS];
    int count = 0;
    for (int t = 0; t < 2; t++) {
        PyObject *text = texts[t];
        if (text == Py_None)
            continue;
        if (!PyUnicode_Check(text))
            Py_RETURN_NONE;
        if (str_ready(text) < 0)
            return NULL;
        Py_ssize_t n = PyUnicode_GET_LENGTH(text);
        int kind = PyUnicode_KIND(text);
        const void *data = PyUnicode_DATA(text);
        if (t == 0) { /* the UNIQ_KEY: whole, when not empty */
            if (n == 0)
                continue;
            if (count == MAX_KEYS)
                Py_RETURN_NONE;
            key_text[count] = text;
            key_begin[count] = 0;
            key_end[count++] = n;
            continue;
        }
        Py_ssize_t begin = 0;
        for (Py_ssize_t i = 0; i <= n; i++) {
            if (i == n || PyUnicode_READ(kind, data, i) == ' ') {
                if (i > begin) {
                    if (count == MAX_KEYS)
                        Py_RETURN_NONE;
                    key_text[count] = text;
                    key_begin[count] = begin;
                    key_end[count++] = i;
                }
                begin = i + 1;
            }
        }
    }
    if (index_count + count > index_num)
        Py_RETURN_NONE;
    for (int k = 0; k < count; k++) {
        PyObject *text = key_text[k];
        key_hash[k] = index_hash(PyUnicode_KIND(text), PyUnicode_DATA(text), key_begin[k],
                                 key_end[k], (uint32_t)seed);
        if (key_hash[k] < 0)
            Py_RETURN_NONE;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0)
        return NULL;
    int64_t entries_base = INDEX_HEADER_SIZE + hash_slot_num * 4;
    if ((int64_t)view.len < entries_base + (index_count + count) * INDEX_ENTRY_SIZE) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "the index file's mapping is too small");
        return NULL;
    }
    unsigned char *buf = (unsigned char *)view.buf;
    long new_slots = 0;
    for (int k = 0; k < count; k++)
        new_slots += index_put_entry(buf, hash_slot_num, index_count++, key_hash[k], phy_offset,
                                     time_diff);
    PyBuffer_Release(&view);
    return Py_BuildValue("(Ll)", (long long)index_count, new_slots);
}

/* ------------------------------------------------------------------------------------------ */
/* batches: SEND_BATCH_MESSAGE bodies to records                                                */

/* crc(buffer) & 0x7FFFFFFF for a Python buffer: body_crc by either way. */
static PyObject *
masked_crc(PyObject *arg, uint32_t (*crc)(const unsigned char *, Py_ssize_t))
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t c = crc((const unsigned char *)view.buf, view.len) & 0x7FFFFFFFu;
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

PyDoc_STRVAR(body_crc_doc,
"body_crc(body) -> int\n\nRocketMQ's body CRC: zlib's CRC-32 with the top bit cleared (storage.record.body_crc),\n"
"by the way crc_kernel() names.");

static PyObject *
body_crc(PyObject *module, PyObject *arg)
{
    (void)module;
    return masked_crc(arg, crc32_of);
}

PyDoc_STRVAR(body_crc_table_doc,
"body_crc_table(body) -> int\n\nbody_crc by the tables alone, whatever crc_kernel() says (tests hold the two together).");

static PyObject *
body_crc_table(PyObject *module, PyObject *arg)
{
    (void)module;
    return masked_crc(arg, crc32_of_tables);
}

PyDoc_STRVAR(crc_kernel_doc,
"crc_kernel() -> str\n\nHow body_crc computes: 'pclmul' (carry-less multiplication, x86-64) or 'table'.");

static PyObject *
crc_kernel(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyUnicode_FromString(crc32_kernel());
}

static const char CLUSTER_NEEDLE[] = "CLUSTER\x01";
#define CLUSTER_NEEDLE_LEN 8

static int
contains(const unsigned char *hay, Py_ssize_t n, const char *needle, Py_ssize_t m)
{
    for (Py_ssize_t i = 0; i + m <= n; i++)
        if (hay[i] == (unsigned char)needle[0] && memcmp(hay + i, needle, (size_t)m) == 0)
            return 1;
    return 0;
}

/* One entry of a batch body:
 * | TOTALSIZE i32 | MAGICCODE i32 | BODYCRC i32 | FLAG i32 | BODYLEN i32 | BODY | PROPSLEN i16 | PROPS | */
typedef struct {
    int32_t flag;
    const unsigned char *body;
    Py_ssize_t body_len;
    const unsigned char *props;
    Py_ssize_t props_len;
    int add_separator; /* the CLUSTER property is appended: after a \x02 first */
    int add_cluster;
    Py_ssize_t next;   /* where the next entry starts */
} BatchEntry;

/* The entry at `pos`, as storage.record.decode_batch_body reads it; 0 when malformed. */
static int
batch_entry(const unsigned char *b, Py_ssize_t n, Py_ssize_t pos, BatchEntry *e)
{
    if (pos + 20 > n)
        return 0;
    int32_t size = (int32_t)get_u32(b + pos);
    int32_t body_len = (int32_t)get_u32(b + pos + 16);
    if (size < 22 || size > n - pos || body_len < 0 || 20 + (int64_t)body_len + 2 > size)
        return 0;
    Py_ssize_t p = pos + 20;
    e->flag = (int32_t)get_u32(b + pos + 12);
    e->body = b + p;
    e->body_len = body_len;
    p += body_len;
    int16_t props_len = (int16_t)(((uint16_t)b[p] << 8) | b[p + 1]);
    p += 2;
    if (props_len < 0 || p + props_len != pos + size)
        return 0;
    e->props = b + p;
    e->props_len = props_len;
    e->next = pos + size;
    return 1;
}

/* Whether p[0:n] is UTF-8 that Python's strict codec accepts. */
static int
valid_utf8(const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n && p[i] < 0x80)
        i++;
    if (i == n)
        return 1;
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
    if (s == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(s);
    return 1;
}

/* The properties written for entry `e`: its own, plus CLUSTER when the batch names one and the
 * entry does not (CommitLog.put_messages' rule). Returns their length, or -1 when they are not
 * UTF-8 or would pass 32767 bytes. */
static Py_ssize_t
entry_props(BatchEntry *e, Py_ssize_t cluster_len, int has_cluster, int check_utf8)
{
    if (check_utf8 && !valid_utf8(e->props, e->props_len))
        return -1;
    e->add_cluster = has_cluster && !contains(e->props, e->props_len, CLUSTER_NEEDLE, CLUSTER_NEEDLE_LEN);
    e->add_separator = e->add_cluster && e->props_len > 0 && e->props[e->props_len - 1] != 0x02;
    Py_ssize_t len = e->props_len + e->add_separator
                     + (e->add_cluster ? CLUSTER_NEEDLE_LEN + cluster_len + 1 : 0);
    return len > 32767 ? -1 : len;
}

/* The cluster name's UTF-8 bytes, or none (NULL cluster, 0 length) for None. */
static int
cluster_arg(PyObject *arg, const unsigned char **cluster, Py_ssize_t *len)
{
    *cluster = NULL;
    *len = 0;
    if (arg == Py_None)
        return 0;
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "the cluster must be bytes or None");
        return -1;
    }
    *cluster = (const unsigned char *)PyBytes_AS_STRING(arg);
    *len = PyBytes_GET_SIZE(arg);
    return 0;
}

PyDoc_STRVAR(batch_layout_doc,
"batch_layout(body, cluster, overhead) -> (count, total) | None\n\n"
"How many records a SEND_BATCH_MESSAGE body makes and how many CommitLog bytes they take, each\n"
"record `overhead` bytes plus its body and properties (with CLUSTER added where missing when\n"
"`cluster` is not None), as storage.batch_record.batch_layout_pure counts them; None for any\n"
"body that one refuses.");

static PyObject *
batch_layout(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "batch_layout() takes 3 arguments");
        return NULL;
    }
    const unsigned char *cluster;
    Py_ssize_t cluster_len;
    if (cluster_arg(args[1], &cluster, &cluster_len) < 0)
        return NULL;
    Py_ssize_t overhead;
    if (ssize_arg(args[2], &overhead) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t n = view.len, pos = 0, count = 0;
    int64_t total = 0;
    BatchEntry e;
    while (pos < n) {
        if (!batch_entry(b, n, pos, &e))
            goto refuse;
        Py_ssize_t props_len = entry_props(&e, cluster_len, cluster != NULL, 1);
        if (props_len < 0)
            goto refuse;
        total += overhead + e.body_len + props_len;
        count++;
        pos = e.next;
    }
    PyBuffer_Release(&view);
    if (count == 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(nL)", count, (long long)total);
refuse:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static const char HEX[] = "0123456789ABCDEF";

/* The offset msgId: the store host's bytes, then the offset as 8 big-endian bytes, in hex. */
static PyObject *
message_id(const unsigned char *host, Py_ssize_t host_len, int64_t offset)
{
    unsigned char raw[28];
    memcpy(raw, host, (size_t)host_len);
    put_u64(raw + host_len, (uint64_t)offset);
    Py_ssize_t n = host_len + 8;
    PyObject *id = PyUnicode_New(2 * n, 127);
    if (id == NULL)
        return NULL;
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(id);
    for (Py_ssize_t i = 0; i < n; i++) {
        out[2 * i] = (Py_UCS1)HEX[raw[i] >> 4];
        out[2 * i + 1] = (Py_UCS1)HEX[raw[i] & 0xF];
    }
    return id;
}

PyDoc_STRVAR(encode_batch_into_doc,
"encode_batch_into(target, pos, body, cluster, topic, topic_name, queue_id, queue_offset,\n"
"                  physical_offset, sys_flag, born_timestamp, born_host, store_timestamp,\n"
"                  store_host, reconsume_times) -> (entries, msg_ids)\n\n"
"Write the records of a batch body that batch_layout accepted into `target` at `pos`, back to\n"
"back with consecutive queue offsets (storage.batch_record.encode_batch_into_pure). Returns\n"
"dispatch's entry for each (CommitLog.appended's layout) and each record's offset msgId.\n"
"Raises ValueError, writing nothing, for a body batch_layout refuses or records that do not\n"
"fit the buffer.");

#define BATCH_ARGS 15

static PyObject *
encode_batch_into(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != BATCH_ARGS) {
        PyErr_Format(PyExc_TypeError, "encode_batch_into() takes %d arguments (%zd given)",
                     BATCH_ARGS, nargs);
        return NULL;
    }
    int64_t pos, queue_id, queue_offset, physical_offset, sys_flag, born_ts, store_ts, reconsume;
    if (int_field(args[1], 64, &pos) < 0 || int_field(args[6], 32, &queue_id) < 0
        || int_field(args[7], 64, &queue_offset) < 0 || int_field(args[8], 64, &physical_offset) < 0
        || int_field(args[9], 32, &sys_flag) < 0 || int_field(args[10], 64, &born_ts) < 0
        || int_field(args[12], 64, &store_ts) < 0 || int_field(args[14], 32, &reconsume) < 0)
        return NULL;
    const unsigned char *cluster;
    Py_ssize_t cluster_len;
    if (cluster_arg(args[3], &cluster, &cluster_len) < 0)
        return NULL;
    PyObject *topic = args[4], *topic_name = args[5], *born_host = args[11], *store_host = args[13];
    if (!PyBytes_Check(topic) || !PyUnicode_Check(topic_name) || !PyBytes_Check(born_host)
        || !PyBytes_Check(store_host)) {
        PyErr_SetString(PyExc_TypeError, "topic, hosts must be bytes and the topic name a str");
        return NULL;
    }
    Py_ssize_t born_len = PyBytes_GET_SIZE(born_host), store_len = PyBytes_GET_SIZE(store_host);
    Py_ssize_t topic_len = PyBytes_GET_SIZE(topic);
    if ((born_len != 8 && born_len != 20) || (store_len != 8 && store_len != 20) || topic_len > 127) {
        PyErr_SetString(PyExc_ValueError, "a host is 8 or 20 bytes, a topic at most 127");
        return NULL;
    }
    Py_buffer src;
    if (PyObject_GetBuffer(args[2], &src, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    PyObject *entries = NULL, *ids = NULL, *result = NULL;
    const unsigned char *b = (const unsigned char *)src.buf;
    Py_ssize_t n = src.len, at;
    Py_ssize_t overhead = 72 + born_len + store_len + 1 + topic_len + 2;
    BatchEntry e;
    /* First pass: every entry is whole and the records fit, before a byte is written. */
    int64_t total = 0;
    Py_ssize_t count = 0;
    for (at = 0; at < n; at = e.next, count++) {
        Py_ssize_t props_len;
        if (!batch_entry(b, n, at, &e)
            || (props_len = entry_props(&e, cluster_len, cluster != NULL, 1)) < 0) {
            PyErr_SetString(PyExc_ValueError, "the batch body is malformed");
            goto done;
        }
        total += overhead + e.body_len + props_len;
    }
    if (count == 0 || pos < 0 || total > (int64_t)view.len - pos) {
        PyErr_SetString(PyExc_ValueError, "the batch makes no record, or does not fit the buffer");
        goto done;
    }
    entries = PyList_New(count);
    ids = PyList_New(count);
    if (entries == NULL || ids == NULL)
        goto done;
    unsigned char *p = (unsigned char *)view.buf + pos;
    int64_t physical = physical_offset;
    Py_ssize_t i = 0;
    for (at = 0; at < n; at = e.next, i++) {
        batch_entry(b, n, at, &e);
        Py_ssize_t props_len = entry_props(&e, cluster_len, cluster != NULL, 0);
        int64_t record = overhead + e.body_len + props_len;
        RecordHead head = {
            record, crc32_of(e.body, e.body_len) & 0x7FFFFFFFu, queue_id, e.flag, queue_offset + i,
            physical, sys_flag, born_ts, store_ts, reconsume, 0,
            (const unsigned char *)PyBytes_AS_STRING(born_host),
            (const unsigned char *)PyBytes_AS_STRING(store_host), e.body,
            (const unsigned char *)PyBytes_AS_STRING(topic),
            born_len, store_len, e.body_len, topic_len, props_len,
        };
        p = write_record_head(p, &head);
        unsigned char *props_at = p;
        memcpy(p, e.props, (size_t)e.props_len);
        p += e.props_len;
        if (e.add_separator)
            *p++ = 0x02;
        if (e.add_cluster) {
            memcpy(p, CLUSTER_NEEDLE, CLUSTER_NEEDLE_LEN);
            p += CLUSTER_NEEDLE_LEN;
            memcpy(p, cluster, (size_t)cluster_len);
            p += cluster_len;
            *p++ = 0x02;
        }
        PyObject *props = PyUnicode_DecodeUTF8((const char *)props_at, props_len, "strict");
        if (props == NULL)
            goto done;
        PyObject *entry = Py_BuildValue("(LLLLOiiiN)", (long long)physical, (long long)record,
                                        (long long)store_ts, (long long)(queue_offset + i),
                                        topic_name, (int)queue_id, (int)sys_flag, 0, props);
        if (entry == NULL)
            goto done;
        PyList_SET_ITEM(entries, i, entry);
        PyObject *id = message_id((const unsigned char *)PyBytes_AS_STRING(store_host), store_len,
                                  physical);
        if (id == NULL)
            goto done;
        PyList_SET_ITEM(ids, i, id);
        physical += record;
    }
    result = PyTuple_Pack(2, entries, ids);
done:
    Py_XDECREF(entries);
    Py_XDECREF(ids);
    PyBuffer_Release(&view);
    PyBuffer_Release(&src);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* msync_range: a system call over pages of a mapping, without the lock (the page warmer's thread
 * is common/_populator.c)                                                                    */

#ifdef __linux__
/* The pages of mm[start:end] (clamped to the mapping) as [*from, *to), *from on the page that
 * holds start; 0, or -1 with an exception set. 1 when the range is empty (nothing to do).
 * The buffer is released before the caller's system call, so that closing the mapping from
 * another thread never fails for an export held here; should it be unmapped meanwhile, the
 * call answers ENOMEM, and neither call changes a byte of whatever is mapped there instead. */
int
mapped_pages(PyObject *const *args, uintptr_t *from, uintptr_t *to)
{
    Py_ssize_t start, end;
    if (ssize_arg(args[1], &start) < 0 || ssize_arg(args[2], &end) < 0)
        return -1;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return -1;
    if (start < 0)
        start = 0;
    if (end > view.len)
        end = view.len;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    char *base = (char *)view.buf;
    *from = ((uintptr_t)(base + start)) & ~(page - 1);
    *to = (uintptr_t)(base + end);
    PyBuffer_Release(&view);
    return end > start ? 0 : 1;
}
#endif

PyDoc_STRVAR(msync_range_doc,
"msync_range(mm, start, end) -> int\n\n"
"Write back the pages of mm[start:end] (from the page holding start) and wait for them, as\n"
"fdatasync does for the whole file, without the interpreter lock (msync with MS_SYNC: Linux\n"
"syncs the file's range and the metadata needed to read it). Returns 0, or the errno\n"
"(ENOSYS where it is not Linux: the caller syncs the whole file instead). Pages of the file\n"
"outside the range are left as they are: dirty pages ahead of a writer stay writable instead\n"
"of being written back and write-protected.");

static PyObject *
msync_range(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "msync_range() takes 3 arguments");
        return NULL;
    }
#ifdef __linux__
    uintptr_t from, to;
    int found = mapped_pages(args, &from, &to);
    if (found < 0)
        return NULL;
    int rc = 0;
    if (found == 0) {
        Py_BEGIN_ALLOW_THREADS
        rc = msync((void *)from, (size_t)(to - from), MS_SYNC) == 0 ? 0 : errno;
        Py_END_ALLOW_THREADS
    }
    return PyLong_FromLong(rc);
#else
    (void)args;
    return PyLong_FromLong(ENOSYS);
#endif
}

/* ------------------------------------------------------------------------------------------ */
#ifndef _WIN32 /* Windows has no pwrite: the store appends through the mapping there */
/* write_at: the CommitLog's write into the page cache, keeping the interpreter lock           */

PyDoc_STRVAR(write_at_doc,
"write_at(fd, buffer, length, offset) -> None\n\n"
"Write buffer[:length] to the file at offset (pwrite, repeated until all is written), keeping\n"
"the interpreter lock: a put's write into the page cache takes a microsecond or two, and\n"
"letting go of the lock for it (as os.pwrite does) hands it to dispatch and back on every\n"
"put. Raises OSError.");


static PyObject *
write_at(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "write_at() takes 4 arguments");
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    if (fd < 0 || fd > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "write_at(): not a file descriptor");
        return NULL;
    }
    Py_ssize_t length, offset;
    if (ssize_arg(args[2], &length) < 0 || ssize_arg(args[3], &offset) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (length < 0 || length > view.len || offset < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "write_at(): length or offset out of range");
        return NULL;
    }
    int failed = pwrite_fully((int)fd, (const char *)view.buf, length, offset);
    PyBuffer_Release(&view);
    if (failed)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}
#endif

/* ------------------------------------------------------------------------------------------ */

static PyMethodDef methods[] = {
    {"msync_range", (PyCFunction)(void (*)(void))msync_range, METH_FASTCALL, msync_range_doc},
#ifndef _WIN32
    {"write_at", (PyCFunction)(void (*)(void))write_at, METH_FASTCALL, write_at_doc},
#endif
    {"body_crc", (PyCFunction)body_crc, METH_O, body_crc_doc},
    {"body_crc_table", (PyCFunction)body_crc_table, METH_O, body_crc_table_doc},
    {"crc_kernel", (PyCFunction)crc_kernel, METH_NOARGS, crc_kernel_doc},
    {"batch_layout", (PyCFunction)(void (*)(void))batch_layout, METH_FASTCALL, batch_layout_doc},
    {"encode_batch_into", (PyCFunction)(void (*)(void))encode_batch_into, METH_FASTCALL,
     encode_batch_into_doc},
    {"encode_record_into", (PyCFunction)(void (*)(void))encode_record_into, METH_FASTCALL,
     encode_record_into_doc},
    {"decode_record_fields", (PyCFunction)(void (*)(void))decode_record_fields, METH_FASTCALL,
     decode_record_fields_doc},
    {"dispatch_properties", (PyCFunction)dispatch_properties, METH_O, dispatch_properties_doc},
    {"properties_normalized", (PyCFunction)properties_normalized, METH_O, properties_normalized_doc},
    {"index_put_keys", (PyCFunction)(void (*)(void))index_put_keys, METH_FASTCALL,
     index_put_keys_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "common._storecore",
    "The compiled core of the store's per-record work (see common/speedups.py).",
    -1,
    methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__storecore(void)
{
    crc32_init();
    PyObject *module = PyModule_Create(&module_def);
    if (module != NULL
        && (populator_add_type(module) < 0 || range_syncer_add_type(module) < 0
            || put_counter_add_type(module) < 0
            || dispatch_run_add_functions(module) < 0 || dispatch_one_add_functions(module) < 0
            || pull_gather_add_functions(module) < 0 || append_add_functions(module) < 0
            || property_split_add_functions(module) < 0
            || record_cut_add_functions(module) < 0
            || record_scan_add_functions(module) < 0
            || batch_body_add_functions(module) < 0))
        Py_CLEAR(module);
    return module;
}
