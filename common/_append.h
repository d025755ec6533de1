/* common._storecore's one-step put (common/_append.c): adds append_plain where it can run. */
#ifndef ROCKETDESK_APPEND_H
#define ROCKETDESK_APPEND_H

#include <Python.h>

int append_add_functions(PyObject *module);

#endif
