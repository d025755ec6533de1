/* common._storecore's producer side of a batch (common/_batch_body.c): adds its function. */
#ifndef ROCKETDESK_BATCH_BODY_H
#define ROCKETDESK_BATCH_BODY_H

#include <Python.h>

int batch_body_add_functions(PyObject *module);

#endif
