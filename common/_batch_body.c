/*
 * common._storecore's producer side of a batch: the SEND_BATCH_MESSAGE body of a list of
 * messages, each entry's properties written from its tags, keys, delay level and WAIT with its
 * new UNIQ_KEY, and the ids, in one call. The Python way made a properties string, an id string
 * and four byte strings a message (38 µs for 32 messages of 1 KiB, a seventh of one batch
 * sender's round trip). Only the common case is taken: a message with properties of its own,
 * keys given as a list, a field of an unusual type, anything out of the format's ranges gives
 * None and the caller goes the Python way, which also words any error.
 * cluster/client/batch_body.py's batch_body_pure is its twin (tests/unit/client/test_batch_body.py).
 *
 * Entry layout (MessageDecoder.encodeMessages): TOTALSIZE i32 | MAGICCODE i32 (0) | BODYCRC
 * i32 (0) | FLAG i32 | BODYLEN i32 | BODY | PROPERTIESLEN u16 | PROPERTIES.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "_batch_body.h"
#include "_bytes.h"

#define ENTRY_HEAD 20 /* TOTALSIZE .. BODYLEN */
#define ID_DIGITS 4   /* the counter's hex digits after the id's head */

typedef struct {
    PyObject *body, *tags, *keys; /* new references (tags and keys: NULL when not written) */
    const char *tags_utf8, *keys_utf8;
    Py_ssize_t tags_len, keys_len;
    long long delay; /* written when > 0 */
    int wait;
    int32_t flag;
    Py_ssize_t props_len;
} Entry;

static void
release(Entry *entries, Py_ssize_t count)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_XDECREF(entries[i].body);
        Py_XDECREF(entries[i].tags);
        Py_XDECREF(entries[i].keys);
    }
    PyMem_Free(entries);
}

/* A str attribute written when non-empty: 1 with it (or without it: None or ""), 0 when it is
 * not the common case, -1 on error. */
static int
text_attribute(PyObject *msg, PyObject *name, PyObject **keep, const char **utf8,
               Py_ssize_t *len)
{
    PyObject *value = PyObject_GetAttr(msg, name);
    if (value == NULL)
        return -1;
    if (value == Py_None || (PyUnicode_CheckExact(value) && PyUnicode_GET_LENGTH(value) == 0)) {
        Py_DECREF(value);
        return 1;
    }
    if (!PyUnicode_CheckExact(value)) {
        Py_DECREF(value);
        return 0;
    }
    *utf8 = PyUnicode_AsUTF8AndSize(value, len);
    if (*utf8 == NULL) { /* (a lone surrogate: the Python way raises the error) */
        Py_DECREF(value);
        PyErr_Clear();
        return 0;
    }
    *keep = value;
    return 1;
}

/* Read one message into `e`: 1 when it is the common case, 0 when not, -1 on error. */
static int
read_message(PyObject *msg, Entry *e, PyObject *const *names)
{
    /* names: properties, body, tags, keys, flag, delay_time_level, wait_store_msg_ok */
    PyObject *properties = PyObject_GetAttr(msg, names[0]);
    if (properties == NULL)
        return -1;
    int own = PyObject_IsTrue(properties);
    Py_DECREF(properties);
    if (own != 0)
        return own < 0 ? -1 : 0;
    e->body = PyObject_GetAttr(msg, names[1]);
    if (e->body == NULL)
        return -1;
    if (!PyBytes_CheckExact(e->body))
        return 0;
    int got = text_attribute(msg, names[2], &e->tags, &e->tags_utf8, &e->tags_len);
    if (got <= 0)
        return got;
    got = text_attribute(msg, names[3], &e->keys, &e->keys_utf8, &e->keys_len);
    if (got <= 0)
        return got;
    PyObject *flag = PyObject_GetAttr(msg, names[4]);
    if (flag == NULL)
        return -1;
    int overflow = 0;
    long long flag_value = PyLong_CheckExact(flag) ? PyLong_AsLongLongAndOverflow(flag, &overflow)
                                                   : 0;
    int flag_ok = PyLong_CheckExact(flag) && !overflow && flag_value >= INT32_MIN
                  && flag_value <= INT32_MAX;
    Py_DECREF(flag);
    if (!flag_ok)
        return 0;
    e->flag = (int32_t)flag_value;
    PyObject *delay = PyObject_GetAttr(msg, names[5]);
    if (delay == NULL)
        return -1;
    e->delay = PyLong_CheckExact(delay) ? PyLong_AsLongLongAndOverflow(delay, &overflow) : 0;
    int delay_ok = PyLong_CheckExact(delay) && !overflow;
    Py_DECREF(delay);
    if (!delay_ok)
        return 0;
    PyObject *wait = PyObject_GetAttr(msg, names[6]);
    if (wait == NULL)
        return -1;
    e->wait = PyObject_IsTrue(wait);
    Py_DECREF(wait);
    return e->wait < 0 ? -1 : 1;
}

static char *
put_text(char *p, const char *text, Py_ssize_t len)
{
    memcpy(p, text, (size_t)len);
    return p + len;
}

PyDoc_STRVAR(batch_body_doc,
"batch_body(names, messages, head, first) -> (body, ids) | None\n\n"
"The SEND_BATCH_MESSAGE body of `messages` and their UNIQ_KEY ids (`head` and the four hex\n"
"digits of `first` + i, modulo 65,536), each entry's properties TAGS, KEYS, DELAY, WAIT and\n"
"UNIQ_KEY as the producer writes them; None when a message is not the common case. `names`:\n"
"the attribute names properties, body, tags, keys, flag, delay_time_level, wait_store_msg_ok\n"
"(cluster.client.batch_body.batch_body_pure is its twin).");

static PyObject *
batch_body(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyTuple_CheckExact(args[0]) || PyTuple_GET_SIZE(args[0]) != 7
        || !PyUnicode_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "batch_body() takes a tuple of 7 names, messages, "
                                         "a str and an int");
        return NULL;
    }
    if (!PyList_CheckExact(args[1])) /* (another sequence: the general way) */
        Py_RETURN_NONE;
    PyObject *const *names = &PyTuple_GET_ITEM(args[0], 0);
    PyObject *messages = args[1];
    if (!PyUnicode_IS_ASCII(args[2]))
        Py_RETURN_NONE;
    Py_ssize_t head_len;
    const char *head = PyUnicode_AsUTF8AndSize(args[2], &head_len);
    if (head == NULL)
        return NULL;
    long long first = PyLong_AsLongLong(args[3]);
    if (first == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(messages);
    Entry *entries = PyMem_Calloc(count ? (size_t)count : 1, sizeof(Entry));
    if (entries == NULL)
        return PyErr_NoMemory();
    /* "UNIQ_KEY\x01" head digits "\x02", "WAIT\x01false\x02" at most */
    const Py_ssize_t uniq_len = 9 + head_len + ID_DIGITS + 1;
    Py_ssize_t total = 0;
    for (Py_ssize_t taken = 0; taken < count; taken++) {
        /* (the list is not changed meanwhile: attribute reads run no code of ours, but a
         * message's own could; the item is held while it is read) */
        if (taken >= PyList_GET_SIZE(messages))
            goto not_common;
        PyObject *msg = PyList_GET_ITEM(messages, taken);
        Py_INCREF(msg);
        int got = read_message(msg, &entries[taken], names);
        Py_DECREF(msg);
        if (got < 0)
            goto error;
        if (got == 0)
            goto not_common;
        Entry *e = &entries[taken];
        char delay_text[24];
        /* (in 64 bits, each term checked: a 32-bit build's sizes must not wrap) */
        long long props = (long long)uniq_len + (e->wait ? 10 : 11);
        if (e->tags != NULL)
            props += 6 + (long long)e->tags_len;
        if (e->keys != NULL)
            props += 6 + (long long)e->keys_len;
        if (e->delay > 0)
            props += 7 + snprintf(delay_text, sizeof delay_text, "%lld", e->delay);
        long long body_len = PyBytes_GET_SIZE(e->body);
        if (props > 0xFFFF || body_len > INT32_MAX - ENTRY_HEAD - 2 - props)
            goto not_common;
        long long size = ENTRY_HEAD + body_len + 2 + props;
        if (size > (long long)PY_SSIZE_T_MAX - total)
            goto not_common;
        e->props_len = (Py_ssize_t)props;
        total += (Py_ssize_t)size;
    }
    PyObject *body = PyBytes_FromStringAndSize(NULL, total);
    PyObject *ids = PyList_New(count);
    if (body == NULL || ids == NULL) {
        Py_XDECREF(body);
        Py_XDECREF(ids);
        goto error;
    }
    char *p = PyBytes_AS_STRING(body);
    for (Py_ssize_t i = 0; i < count; i++) {
        Entry *e = &entries[i];
        Py_ssize_t body_len = PyBytes_GET_SIZE(e->body);
        unsigned char *entry = (unsigned char *)p;
        put_u32(entry, (uint32_t)(ENTRY_HEAD + body_len + 2 + e->props_len));
        put_u32(entry + 4, 0);
        put_u32(entry + 8, 0);
        put_u32(entry + 12, (uint32_t)e->flag);
        put_u32(entry + 16, (uint32_t)body_len);
        p = put_text(p + ENTRY_HEAD, PyBytes_AS_STRING(e->body), body_len);
        p[0] = (char)(e->props_len >> 8);
        p[1] = (char)e->props_len;
        p += 2;
        if (e->tags != NULL) {
            p = put_text(p, "TAGS\x01", 5);
            p = put_text(p, e->tags_utf8, e->tags_len);
            *p++ = '\x02';
        }
        if (e->keys != NULL) {
            p = put_text(p, "KEYS\x01", 5);
            p = put_text(p, e->keys_utf8, e->keys_len);
            *p++ = '\x02';
        }
        if (e->delay > 0) {
            char delay_text[24];
            int n = snprintf(delay_text, sizeof delay_text, "%lld", e->delay);
            p = put_text(p, "DELAY\x01", 6);
            p = put_text(p, delay_text, n);
            *p++ = '\x02';
        }
        p = e->wait ? put_text(p, "WAIT\x01true\x02", 10) : put_text(p, "WAIT\x01" "false\x02", 11);
        p = put_text(p, "UNIQ_KEY\x01", 9);
        char *id = p;
        p = put_text(p, head, head_len);
        char digits[ID_DIGITS + 1];
        snprintf(digits, sizeof digits, "%04X", (unsigned)((unsigned long long)(first + i) & 0xFFFF));
        p = put_text(p, digits, ID_DIGITS);
        PyObject *text = PyUnicode_DecodeASCII(id, p - id, NULL);
        if (text == NULL) {
            Py_DECREF(body);
            Py_DECREF(ids);
            goto error;
        }
        PyList_SET_ITEM(ids, i, text);
        *p++ = '\x02';
    }
    release(entries, count);
    PyObject *result = PyTuple_Pack(2, body, ids);
    Py_DECREF(body);
    Py_DECREF(ids);
    return result;

not_common: /* (entries not read are zeroed: releasing them all is safe) */
    release(entries, count);
    Py_RETURN_NONE;
error:
    release(entries, count);
    return NULL;
}

static PyMethodDef batch_body_methods[] = {
    {"batch_body", (PyCFunction)(void (*)(void))batch_body, METH_FASTCALL, batch_body_doc},
    {NULL, NULL, 0, NULL},
};

int
batch_body_add_functions(PyObject *module)
{
    return PyModule_AddFunctions(module, batch_body_methods);
}
