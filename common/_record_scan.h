/* common._storecore's recovery scan of a CommitLog file (common/_record_scan.c): adds its
 * function. */
#ifndef ROCKETDESK_RECORD_SCAN_H
#define ROCKETDESK_RECORD_SCAN_H

#include <Python.h>

int record_scan_add_functions(PyObject *module);

#endif
