/* common._storecore's split of property strings for the export (common/_property_split.c). */
#ifndef ROCKETDESK_PROPERTY_SPLIT_H
#define ROCKETDESK_PROPERTY_SPLIT_H

#include <Python.h>

int property_split_add_functions(PyObject *module);

#endif
