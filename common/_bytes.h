/*
 * Big-endian reads and writes of the store's fixed-width fields (CommitLog records,
 * ConsumeQueue units, index entries), shared by the files of common._storecore. Header-only.
 */
#ifndef ROCKETDESK_BYTES_H
#define ROCKETDESK_BYTES_H

#include <stdint.h>

static inline void
put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void
put_u64(unsigned char *p, uint64_t v)
{
    put_u32(p, (uint32_t)(v >> 32));
    put_u32(p + 4, (uint32_t)v);
}

static inline uint32_t
get_u32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t
get_u64(const unsigned char *p)
{
    return ((uint64_t)get_u32(p) << 32) | get_u32(p + 4);
}

#endif
