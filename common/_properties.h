/*
 * A RocketMQ properties string ("name\x01value\x02..." in UTF-8) searched for a few names at
 * once, as storage.message.property_from_string finds each: the last occurrence with a
 * non-empty value. Shared by dispatch's property scan (common/_storecore.c) and the dispatch of
 * a run (common/_dispatch_run.c). And whether such a string is in normal form (the store keeps
 * it as it came), shared by the store and the send lane's checks (common/_send_fields.c).
 * Header-only.
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

#define MAX_NORMAL_SEGMENTS 64

/* Whether parsing s[0:n] as properties and writing them back gives it again
 * (storage.message.properties_normalized_pure): pairs "name\x01value\x02" with a name and a
 * value, no name twice. 0 for anything else, and for over 64 pairs. */
static inline int
normalized_properties(const char *s, Py_ssize_t n)
{
    if (n == 0)
        return 1;
    if (s[n - 1] != '\x02')
        return 0;
    const char *names[MAX_NORMAL_SEGMENTS];
    Py_ssize_t name_lengths[MAX_NORMAL_SEGMENTS];
    int count = 0;
    const char *segment = s, *end = s + n;
    while (segment < end) {
        const char *stop = memchr(segment, '\x02', (size_t)(end - segment)); /* found: ends in one */
        const char *sep = memchr(segment, '\x01', (size_t)(stop - segment));
        if (sep == NULL || sep == segment || sep + 1 == stop || count == MAX_NORMAL_SEGMENTS)
            return 0;
        Py_ssize_t name_len = sep - segment;
        for (int i = 0; i < count; i++)
            if (name_lengths[i] == name_len && memcmp(names[i], segment, (size_t)name_len) == 0)
                return 0;
        names[count] = segment;
        name_lengths[count++] = name_len;
        segment = stop + 1;
    }
    return 1;
}

#endif
