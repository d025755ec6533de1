/*
 * common._speedups' send_fields: the checks of the send lane (cluster/broker/send_lane.py) in
 * one call. From the tuple the decoder split, a SEND_MESSAGE(_V2) request's header is decoded
 * by the SendMessageRequestHeader plan (as the header's own fast decoder does, with its checks:
 * the topic names, the sysFlag bits a producer may set) and the request is held to the common
 * case the lane takes: a JSON request wanting its answer, no batch, a queue it names, no
 * transaction bits, not a retry topic, properties in normal form with a UNIQ_KEY and none of
 * TRAN_MSG, CLUSTER, TIMER_*, DELAY. The fields the lane needs come back as a tuple, or None
 * for anything else (the processor's way, which decides and words it). Its pure twin,
 * send_lane.send_fields_pure, stays the reference (tests/unit/broker/test_send_lane.py).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_header_fields.h"
#include "_properties.h"

/* SendMessageRequestHeader's fields, in its declaration order (the plan's). */
enum {
    F_GROUP, F_TOPIC, F_DEFAULT_TOPIC, F_DEFAULT_QUEUES, F_QUEUE_ID, F_SYS_FLAG, F_BORN_TS,
    F_FLAG, F_PROPERTIES, F_RECONSUME, F_UNIT_MODE, F_MAX_RECONSUME, F_BATCH, F_BNAME, F_COUNT
};

#define TRANSACTION_TYPE_MASK 0xC
#define HOST_FLAGS 0x30 /* BORNHOST_V6 | STOREHOSTADDRESS_V6: the store's to set */

/* TopicValidator: 1 to 127 characters of [%|a-zA-Z0-9_-]. */
static int
valid_topic(PyObject *name)
{
    if (!PyUnicode_Check(name) || !PyUnicode_IS_ASCII(name))
        return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(name);
    if (n < 1 || n > 127)
        return 0;
    const unsigned char *p = PyUnicode_1BYTE_DATA(name);
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
              || c == '%' || c == '|' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static int
contains(const char *hay, Py_ssize_t n, const char *needle)
{
    Py_ssize_t m = (Py_ssize_t)strlen(needle);
    for (Py_ssize_t i = 0; i + m <= n; i++)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, (size_t)m) == 0)
            return 1;
    return 0;
}

/* Whether the properties are the lane's: see the file's comment. */
static int
plain_properties(const char *s, Py_ssize_t n)
{
    static const char *const special[] = {"TRAN_MSG\x01", "CLUSTER\x01", "TIMER_", "DELAY\x01"};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        if (contains(s, n, special[i]))
            return 0;
    if (!((n >= 9 && memcmp(s, "UNIQ_KEY\x01", 9) == 0) || contains(s, n, "\x02UNIQ_KEY\x01")))
        return 0;
    return normalized_properties(s, n);
}

static long long
as_long(PyObject *value)
{
    return PyLong_AsLongLong(value); /* (the plan made it: an int in its field's range) */
}

PyDoc_STRVAR(send_fields_doc,
"send_fields(plan, v2_code, client_sys_flags, frame) -> tuple | None\n\n"
"(topic, queue id, flag, sysFlag without the host bits, born timestamp, properties, reconsume\n"
"times) of a split SEND_MESSAGE(_V2) frame the send lane takes, else None\n"
"(cluster.broker.send_lane.send_fields_pure).");

/* send_fields for one frame: the tuple, None, or NULL with an exception set. */
static PyObject *
fields_of(PyObject *plan, PyObject *v2_code, PyObject *client_sys_flags, PyObject *frame)
{
    if (!PyTuple_Check(frame) || PyTuple_GET_SIZE(frame) != 10 || !PyTuple_Check(plan)
        || PyTuple_GET_SIZE(plan) != F_COUNT)
        Py_RETURN_NONE;
    PyObject *flag = PyTuple_GET_ITEM(frame, 3), *serialize = PyTuple_GET_ITEM(frame, 8);
    PyObject *values = PyTuple_GET_ITEM(frame, 5);
    if (!PyLong_CheckExact(flag) || PyLong_AsLong(flag) != 0 || !PyLong_CheckExact(serialize)
        || PyLong_AsLong(serialize) != 0 || !PyDict_Check(values))
        Py_RETURN_NONE; /* oneway, or not JSON: not the answer's template */
    int aliased = PyObject_RichCompareBool(PyTuple_GET_ITEM(frame, 1), v2_code, Py_EQ);
    if (aliased < 0)
        return NULL;
    long long client_flags = PyLong_AsLongLong(client_sys_flags);
    if (client_flags == -1 && PyErr_Occurred())
        return NULL;

    PyObject *field[F_COUNT] = {NULL};
    PyObject *result = NULL;
    for (int i = 0; i < F_COUNT; i++) {
        int done = decode_header_value(values, PyTuple_GET_ITEM(plan, i), aliased, &field[i]);
        if (done < 0)
            goto out;
        if (done == 0) {
            result = Py_NewRef(Py_None);
            goto out;
        }
    }
    /* The header's checks (a value the reference would refuse: the processor words it). */
    if ((field[F_TOPIC] != Py_None && !valid_topic(field[F_TOPIC]))
        || (field[F_DEFAULT_TOPIC] != Py_None && !valid_topic(field[F_DEFAULT_TOPIC]))
        || field[F_TOPIC] == Py_None) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    long long sys_flag = as_long(field[F_SYS_FLAG]), queue_id = as_long(field[F_QUEUE_ID]);
    if (PyErr_Occurred())
        goto out;
    if (sys_flag & ~client_flags || sys_flag & TRANSACTION_TYPE_MASK || queue_id < 0
        || field[F_BATCH] == Py_True) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    PyObject *topic = field[F_TOPIC];
    if (PyUnicode_GET_LENGTH(topic) >= 7
        && memcmp(PyUnicode_1BYTE_DATA(topic), "%RETRY%", 7) == 0) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    PyObject *properties = field[F_PROPERTIES];
    if (!PyUnicode_Check(properties)) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    Py_ssize_t n;
    const char *text = PyUnicode_AsUTF8AndSize(properties, &n);
    if (text == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            goto out;
        PyErr_Clear();
        result = Py_NewRef(Py_None); /* a lone surrogate: not the lane's */
        goto out;
    }
    if (!plain_properties(text, n)) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    result = Py_BuildValue("(OOOLOOO)", topic, field[F_QUEUE_ID], field[F_FLAG],
                           sys_flag & ~HOST_FLAGS, field[F_BORN_TS], properties,
                           field[F_RECONSUME]);
out:
    for (int i = 0; i < F_COUNT; i++)
        Py_XDECREF(field[i]);
    return result;
}

static PyObject *
send_fields(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "send_fields() takes 4 arguments");
        return NULL;
    }
    return fields_of(args[0], args[1], args[2], args[3]);
}

PyDoc_STRVAR(send_run_puts_doc,
"send_run_puts(plan, v2_code, client_sys_flags, frames, limits, limit_of, suffix, host)\n"
"    -> list\n\n"
"The store's puts (CommitLog.append_plain's arguments) for the first frames of a run the send\n"
"lane takes, up to the first it does not: send_fields for each, its topic's queue count and\n"
"stored name from ``limits`` (asked of ``limit_of(topic)`` once a topic, and kept there), the\n"
"properties with ``suffix`` (the broker's CLUSTER) appended, ``host`` as the born host\n"
"(cluster.broker.send_lane.SendLane._run_puts_pure).");

static PyObject *
send_run_puts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 8 || !PyList_CheckExact(args[3]) || !PyDict_CheckExact(args[4])
        || !PyUnicode_CheckExact(args[6])) {
        PyErr_SetString(PyExc_TypeError, "send_run_puts() takes a plan, a code, flags, a list "
                        "of frames, a dict, a callable, a str and the host");
        return NULL;
    }
    PyObject *frames = args[3], *limits = args[4], *limit_of = args[5], *suffix = args[6];
    PyObject *puts = PyList_New(0);
    if (puts == NULL)
        return NULL;
    PyObject *frame = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(frames); i++) {
        /* (held: limit_of runs Python, which could change the list) */
        Py_XSETREF(frame, Py_NewRef(PyList_GET_ITEM(frames, i)));
        PyObject *fields = fields_of(args[0], args[1], args[2], frame);
        if (fields == NULL)
            goto failed;
        if (fields == Py_None) {
            Py_DECREF(fields);
            break;
        }
        /* (topic, queue id, flag, sysFlag, born timestamp, properties, reconsume times) */
        PyObject *topic = PyTuple_GET_ITEM(fields, 0);
        PyObject *limit = PyDict_GetItemWithError(limits, topic); /* borrowed */
        if (limit == NULL) {
            if (PyErr_Occurred()) {
                Py_DECREF(fields);
                goto failed;
            }
            limit = PyObject_CallOneArg(limit_of, topic);
            if (limit == NULL || PyDict_SetItem(limits, topic, limit) < 0) {
                Py_XDECREF(limit);
                Py_DECREF(fields);
                goto failed;
            }
            Py_DECREF(limit); /* (the dict holds it) */
        }
        if (!PyTuple_Check(limit) || PyTuple_GET_SIZE(limit) != 2) {
            Py_DECREF(fields);
            PyErr_SetString(PyExc_TypeError, "a topic's limit is (queue count, name)");
            goto failed;
        }
        int beyond = PyObject_RichCompareBool(PyTuple_GET_ITEM(fields, 1),
                                              PyTuple_GET_ITEM(limit, 0), Py_GE);
        if (beyond != 0) {
            Py_DECREF(fields);
            if (beyond < 0)
                goto failed;
            break;
        }
        PyObject *properties = PyUnicode_Concat(PyTuple_GET_ITEM(fields, 5), suffix);
        if (properties == NULL) {
            Py_DECREF(fields);
            goto failed;
        }
        PyObject *put = PyTuple_Pack(10, topic, PyTuple_GET_ITEM(limit, 1),
                                     PyTuple_GET_ITEM(fields, 1), PyTuple_GET_ITEM(fields, 2),
                                     PyTuple_GET_ITEM(frame, 9), properties,
                                     PyTuple_GET_ITEM(fields, 3), PyTuple_GET_ITEM(fields, 4),
                                     args[7], PyTuple_GET_ITEM(fields, 6));
        Py_DECREF(properties);
        Py_DECREF(fields);
        if (put == NULL)
            goto failed;
        int appended = PyList_Append(puts, put);
        Py_DECREF(put);
        if (appended < 0)
            goto failed;
    }
    Py_XDECREF(frame);
    return puts;
failed:
    Py_XDECREF(frame);
    Py_DECREF(puts);
    return NULL;
}

static PyMethodDef send_fields_methods[] = {
    {"send_fields", (PyCFunction)(void (*)(void))send_fields, METH_FASTCALL, send_fields_doc},
    {"send_run_puts", (PyCFunction)(void (*)(void))send_run_puts, METH_FASTCALL,
     send_run_puts_doc},
    {NULL, NULL, 0, NULL},
};

int
send_fields_add_functions(PyObject *module)
{
    return PyModule_AddFunctions(module, send_fields_methods);
}
