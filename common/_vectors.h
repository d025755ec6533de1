/*
 * int64 vector arguments (numpy arrays, array('q')) of the files of common._storecore that
 * take starts and lengths (common/_pull_gather.c, common/_record_cut.c). Header-only.
 */
#ifndef ROCKETDESK_VECTORS_H
#define ROCKETDESK_VECTORS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* `arg` as a contiguous vector of native int64s: 0 with `view` held, or -1 with TypeError
 * (`error`) or the buffer's own error set. */
static inline int
int64_vector(PyObject *arg, Py_buffer *view, const char *error)
{
    if (PyObject_GetBuffer(arg, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    const char *f = view->format == NULL ? "B" : view->format;
    if (*f == '<' || *f == '=' || *f == '@')
        f++;
    if (view->itemsize != 8 || (strcmp(f, "q") != 0 && strcmp(f, "l") != 0)) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, error);
        return -1;
    }
    return 0;
}

/* The i-th int64 of a vector, which need not be aligned (a numpy view at an odd offset). */
static inline int64_t
int64_at(const char *vector, Py_ssize_t i)
{
    int64_t value;
    memcpy(&value, vector + i * (Py_ssize_t)sizeof(int64_t), sizeof value);
    return value;
}

#endif
