/* common._storecore's dispatch of a run (common/_dispatch_run.c): adds its functions. */
#ifndef ROCKETDESK_DISPATCH_RUN_H
#define ROCKETDESK_DISPATCH_RUN_H

#include <Python.h>

int dispatch_run_add_functions(PyObject *module);

#endif
