/* common._storecore's read of a pull (common/_pull_gather.c): adds its function. */
#ifndef ROCKETDESK_PULL_GATHER_H
#define ROCKETDESK_PULL_GATHER_H

#include <Python.h>

int pull_gather_add_functions(PyObject *module);

#endif
