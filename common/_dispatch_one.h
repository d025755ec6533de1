/* common._storecore's dispatch of one plain record (common/_dispatch_one.c): adds its function. */
#ifndef ROCKETDESK_DISPATCH_ONE_H
#define ROCKETDESK_DISPATCH_ONE_H

#include <Python.h>

int dispatch_one_add_functions(PyObject *module);

#endif
