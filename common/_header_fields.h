/* common._speedups' decoding of one request-header field by its plan entry (common/_speedups.c),
 * for the send lane's fields (common/_send_fields.c). */
#ifndef ROCKETDESK_HEADER_FIELDS_H
#define ROCKETDESK_HEADER_FIELDS_H

#include <Python.h>

/* 1 with *out a new reference, 0 for the reference decoder to decide, -1 on a Python error. */
int decode_header_value(PyObject *values, PyObject *spec, int aliased, PyObject **out);

/* Adds send_fields to the module. */
int send_fields_add_functions(PyObject *module);

#endif
