/*
 * common._storecore.PutCounter: the store's put counters (storage/stats.py's PutCounter is
 * its pure twin, and the reference).
 *
 * Every put counts itself: messages, bytes, a latency bucket, the slowest put, and the
 * topic's messages and bytes. In Python that took 0.47 us a put, a third of what put_plain
 * adds to the compiled append: a method's frame, a lock taken and released, five attribute
 * updates and a PyLong made for each sum. Here one call, no allocation once a topic is known,
 * and no lock of its own: a call runs whole under the interpreter lock, so no other thread
 * sees a put half counted.
 */
#include "_put_counter.h"

#include <limits.h>
#include <stdint.h>

/* Upper bounds (ms) of the latency buckets, RocketMQ's putMessageDistributeTime; the last
 * bucket takes everything above 10 s (storage/stats.py: PUT_LATENCY_BOUNDS_MS). */
static const double BOUNDS_MS[] = {0, 10, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 5000,
                                   10000};
#define N_BOUNDS ((Py_ssize_t)(sizeof(BOUNDS_MS) / sizeof(BOUNDS_MS[0])))
#define N_BUCKETS (N_BOUNDS + 1)

typedef struct {
    PyObject_HEAD
    long long times;          /* messages put */
    long long size;           /* bytes put */
    double max_ms;            /* the slowest put */
    long long buckets[N_BUCKETS];
    PyObject *topics;         /* topic -> its index in pairs (a PyLong) */
    long long (*pairs)[2];    /* per topic: messages, bytes */
    Py_ssize_t n_pairs, cap_pairs;
} PutCounter;

static PyObject *
counter_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "PutCounter() takes no arguments");
        return NULL;
    }
    PutCounter *self = (PutCounter *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->topics = PyDict_New();
    if (self->topics == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void
counter_dealloc(PutCounter *self)
{
    Py_XDECREF(self->topics);
    PyMem_Free(self->pairs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The index of the first bound >= elapsed, as bisect.bisect_left finds it (NaN: 0). */
static Py_ssize_t
bucket_of(double elapsed)
{
    Py_ssize_t lo = 0, hi = N_BOUNDS;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (BOUNDS_MS[mid] < elapsed)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* A new topic's pair (zeros); NULL with an exception set. */
static long long *
new_pair(PutCounter *self, PyObject *topic)
{
    if (self->n_pairs == self->cap_pairs) {
        Py_ssize_t cap = self->cap_pairs ? self->cap_pairs * 2 : 8;
        if (cap > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(self->pairs[0])) {
            PyErr_NoMemory();
            return NULL;
        }
        long long (*grown)[2] = PyMem_Realloc(self->pairs, (size_t)cap * sizeof(self->pairs[0]));
        if (grown == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        self->pairs = grown;
        self->cap_pairs = cap;
    }
    PyObject *number = PyLong_FromSsize_t(self->n_pairs);
    if (number == NULL)
        return NULL;
    int failed = PyDict_SetItem(self->topics, topic, number);
    Py_DECREF(number);
    if (failed)
        return NULL;
    long long *pair = self->pairs[self->n_pairs++];
    pair[0] = pair[1] = 0;
    return pair;
}

/* Whether a + b leaves the range of long long (checked before any count changes). */
static int
sum_overflows(long long a, long long b)
{
    return b > 0 ? a > LLONG_MAX - b : a < LLONG_MIN - b;
}

/* An int argument, as operator.index takes it (a float is refused). */
static int
int_arg(PyObject *value, const char *name, long long *out)
{
    PyObject *number = PyNumber_Index(value);
    if (number == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", name,
                         Py_TYPE(value)->tp_name);
        }
        return -1;
    }
    *out = PyLong_AsLongLong(number);
    Py_DECREF(number);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *
counter_record(PutCounter *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    /* (puts may come by name: record(..., puts=5)) */
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *puts_arg = nargs == 5 ? args[4] : NULL;
    if (nkw == 1 && nargs == 4
            && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "puts") == 0) {
        puts_arg = args[4];
    } else if (nkw != 0 || nargs < 4 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError,
                        "record(topic, count, size, elapsed_ms, puts=1) takes 4 arguments and "
                        "puts, by position or by name");
        return NULL;
    }
    /* An exact str, checked first: its hash and comparison run no Python code, so nothing
     * else runs in the middle of this call once the numbers are read (another thread's
     * record would otherwise take the same slot). */
    PyObject *topic = args[0];
    if (!PyUnicode_CheckExact(topic)) {
        PyErr_Format(PyExc_TypeError, "topic must be a str, not %.100s", Py_TYPE(topic)->tp_name);
        return NULL;
    }
    long long count, size, puts = 1;
    if (int_arg(args[1], "count", &count) < 0 || int_arg(args[2], "size", &size) < 0
        || (puts_arg != NULL && int_arg(puts_arg, "puts", &puts) < 0))
        return NULL;
    double elapsed;
    if (PyFloat_CheckExact(args[3])) {
        elapsed = PyFloat_AS_DOUBLE(args[3]);
    } else if (PyFloat_Check(args[3]) || PyLong_Check(args[3])) {
        PyObject *number = PyNumber_Float(args[3]);  /* (as float() takes it) */
        if (number == NULL)
            return NULL;
        elapsed = PyFloat_AS_DOUBLE(number);
        Py_DECREF(number);
    } else {
        PyErr_Format(PyExc_TypeError, "elapsed_ms must be a number, not %.100s",
                     Py_TYPE(args[3])->tp_name);
        return NULL;
    }
    PyObject *index = PyDict_GetItemWithError(self->topics, topic);  /* borrowed */
    if (index == NULL && PyErr_Occurred())
        return NULL;
    long long *pair = index != NULL ? self->pairs[PyLong_AsSsize_t(index)] : NULL;
    Py_ssize_t bucket = bucket_of(elapsed);
    /* Every sum checked before any changes: a refused count leaves the counter as it was. */
    if (sum_overflows(self->times, count) || sum_overflows(self->size, size)
        || sum_overflows(self->buckets[bucket], puts)
        || (pair != NULL && (sum_overflows(pair[0], count) || sum_overflows(pair[1], size)))) {
        PyErr_SetString(PyExc_OverflowError, "a put counter would leave the range of int64");
        return NULL;
    }
    if (pair == NULL && (pair = new_pair(self, topic)) == NULL)
        return NULL;  /* (a new pair starts at zero: its sums cannot overflow) */
    self->times += count;
    self->size += size;
    self->buckets[bucket] += puts;
    if (elapsed > self->max_ms)
        self->max_ms = elapsed;
    pair[0] += count;
    pair[1] += size;
    Py_RETURN_NONE;
}

static PyObject *
counter_totals(PutCounter *self, PyObject *unused)
{
    return Py_BuildValue("(LLd)", self->times, self->size, self->max_ms);
}

static PyObject *
counter_buckets(PutCounter *self, PyObject *unused)
{
    PyObject *list = PyList_New(N_BUCKETS);
    if (list == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < N_BUCKETS; i++) {
        PyObject *n = PyLong_FromLongLong(self->buckets[i]);
        if (n == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, n);
    }
    return list;
}

static PyObject *
counter_topic_puts(PutCounter *self, PyObject *unused)
{
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    PyObject *topic, *index;
    Py_ssize_t pos = 0;
    while (PyDict_Next(self->topics, &pos, &topic, &index)) {
        long long *pair = self->pairs[PyLong_AsSsize_t(index)];
        PyObject *value = Py_BuildValue("(LL)", pair[0], pair[1]);
        if (value == NULL || PyDict_SetItem(out, topic, value) < 0) {
            Py_XDECREF(value);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(value);
    }
    return out;
}

static PyMethodDef counter_methods[] = {
    {"record", (PyCFunction)(void (*)(void))counter_record, METH_FASTCALL | METH_KEYWORDS,
     "record($self, topic, count, size, elapsed_ms, /, puts=1)\n--\n\nCount ``puts`` puts of ``count`` "
     "messages and ``size`` bytes in all, each taking up to ``elapsed_ms``."},
    {"totals", (PyCFunction)counter_totals, METH_NOARGS,
     "totals() -> (messages, bytes, the slowest put's ms)"},
    {"buckets", (PyCFunction)counter_buckets, METH_NOARGS,
     "buckets() -> puts in each latency bucket (a new list)"},
    {"topic_puts", (PyCFunction)counter_topic_puts, METH_NOARGS,
     "topic_puts() -> {topic: (messages, bytes)} (a new dict)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PutCounterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "common._storecore.PutCounter",
    .tp_basicsize = sizeof(PutCounter),
    .tp_dealloc = (destructor)counter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "PutCounter()\n\nThe store's put counters, counted under the interpreter lock "
              "(storage/stats.py: its pure twin).",
    .tp_methods = counter_methods,
    .tp_new = counter_new,
};

int
put_counter_add_type(PyObject *module)
{
    if (PyType_Ready(&PutCounterType) < 0)
        return -1;
    Py_INCREF(&PutCounterType);
    if (PyModule_AddObject(module, "PutCounter", (PyObject *)&PutCounterType) < 0) {
        Py_DECREF(&PutCounterType);
        return -1;
    }
    return 0;
}
