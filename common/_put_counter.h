/* common._storecore.PutCounter (common/_put_counter.c): adds the type to the module. */
#ifndef ROCKETDESK_PUT_COUNTER_H
#define ROCKETDESK_PUT_COUNTER_H

#include <Python.h>

int put_counter_add_type(PyObject *module);

#endif
