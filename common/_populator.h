/* common._storecore.Populator (common/_populator.c): adds the type to the module. */
#ifndef ROCKETDESK_POPULATOR_H
#define ROCKETDESK_POPULATOR_H

#include <Python.h>
#include <stdint.h>

int populator_add_type(PyObject *module);

#ifdef __linux__
/* In common/_storecore.c: the pages of mm[start:end] (args: mm, start, end), clamped to the
 * mapping, as [*from, *to); 0, 1 when empty, -1 with an exception set. */
int mapped_pages(PyObject *const *args, uintptr_t *from, uintptr_t *to);
#endif

#endif
