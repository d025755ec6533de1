/* common._storecore.RangeSyncer (common/_range_sync.c): adds the type to the module. */
#ifndef ROCKETDESK_RANGE_SYNC_H
#define ROCKETDESK_RANGE_SYNC_H

#include <Python.h>

int range_syncer_add_type(PyObject *module);

#endif
