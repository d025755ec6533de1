/*
 * Helpers the compiled modules (common/_speedups.c, common/_storecore.c) share. Header-only:
 * each module is its own extension, so each gets its own static copy.
 */
#ifndef ROCKETDESK_TEXT_H
#define ROCKETDESK_TEXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Strict UTF-8 text; NULL with no exception set when the bytes are not UTF-8. */
static inline PyObject *
decode_text(const unsigned char *p, Py_ssize_t n)
{
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
    if (s == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
        PyErr_Clear();
    return s;
}

/* A Py_ssize_t argument; -1 with the error set when it is not one. */
static inline int
ssize_arg(PyObject *arg, Py_ssize_t *out)
{
    *out = PyLong_AsSsize_t(arg);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* Python 3.11 may still hold legacy strings that must be made ready before their data is read. */
static inline int
str_ready(PyObject *s)
{
#if PY_VERSION_HEX < 0x030C0000
    return PyUnicode_READY(s);
#else
    (void)s;
    return 0;
#endif
}

/* The UTF-8 of a str argument of `function`: NULL with TypeError set for anything else, NULL
 * with no error set for text that has no UTF-8 (a lone surrogate: the caller's pure twin
 * copes with it). */
static inline const char *
utf8_arg(PyObject *text, const char *function, Py_ssize_t *n)
{
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "%s() needs a str, not %.100s", function,
                     Py_TYPE(text)->tp_name);
        return NULL;
    }
    const char *s = PyUnicode_AsUTF8AndSize(text, n);
    if (s == NULL)
        PyErr_Clear();
    return s;
}

#endif
