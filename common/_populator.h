/* common._storecore.Populator (common/_populator.c): adds the type to the module. */
#ifndef ROCKETDESK_POPULATOR_H
#define ROCKETDESK_POPULATOR_H

#include <Python.h>

int populator_add_type(PyObject *module);

#endif
