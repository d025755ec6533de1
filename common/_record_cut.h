/* common._storecore's cut of a batch of records into the export's columns (common/_record_cut.c). */
#ifndef ROCKETDESK_RECORD_CUT_H
#define ROCKETDESK_RECORD_CUT_H

#include <Python.h>

int record_cut_add_functions(PyObject *module);

#endif
