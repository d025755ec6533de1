/*
 * A RocketMQ properties string ("name\x01value\x02..." in UTF-8) searched for a few names at
 * once, as storage.message.property_from_string finds each: the last occurrence with a
 * non-empty value. Shared by dispatch's property scan (common/_storecore.c) and the dispatch of
 * a run (common/_dispatch_run.c). Header-only.
 */
#ifndef ROCKETDESK_PROPERTIES_H
#define ROCKETDESK_PROPERTIES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* found[i] and found_len[i]: the value of names[i] (NULL, 0 when there is none). */
static inline void
scan_properties(const char *s, Py_ssize_t n, int count, const char *const *names,
                const Py_ssize_t *lengths, const char **found, Py_ssize_t *found_len)
{
    for (int i = 0; i < count; i++) {
        found[i] = NULL;
        found_len[i] = 0;
    }
    const char *end = s + n, *segment = s;
    while (segment <= end) {
        const char *stop = memchr(segment, '\x02', (size_t)(end - segment));
        if (stop == NULL)
            stop = end;
        const char *sep = memchr(segment, '\x01', (size_t)(stop - segment));
        if (sep != NULL && sep + 1 < stop) { /* a name, then a non-empty value */
            Py_ssize_t name_len = sep - segment;
            for (int i = 0; i < count; i++) {
                if (name_len == lengths[i] && memcmp(segment, names[i], (size_t)name_len) == 0) {
                    found[i] = sep + 1;
                    found_len[i] = stop - sep - 1;
                    break;
                }
            }
        }
        segment = stop + 1;
    }
}

#endif
