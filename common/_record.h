/*
 * The CommitLog record's layout, written in one place for the files of common._storecore that
 * write records (a put, a batch's records, the one-step put of common/_append.c), and its
 * body CRC. Header-only but for crc32_of (common/_crc32.c).
 */
#ifndef ROCKETDESK_RECORD_H
#define ROCKETDESK_RECORD_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_bytes.h"

#define MAGIC_V1 0xDAA320A7u
#define MAGIC_V2 0xDAA320ABu
#define BORNHOST_V6_FLAG 0x10
#define STOREHOST_V6_FLAG 0x20
#define MIN_RECORD 91

/* A record's fields but its properties, which the callers write after it. */
typedef struct {
    int64_t total, crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts;
    int64_t store_ts, reconsume, prepared;
    const unsigned char *born_host, *store_host, *body, *topic;
    Py_ssize_t born_len, store_len, body_len, topic_len, props_len;
} RecordHead;

/* Write everything of a record up to its properties (whose length it writes); returns where
 * the properties go. The caller has checked that the whole record fits. */
static inline unsigned char *
write_record_head(unsigned char *p, const RecordHead *r)
{
    put_u32(p, (uint32_t)r->total);
    put_u32(p + 4, MAGIC_V1);
    put_u32(p + 8, (uint32_t)r->crc);
    put_u32(p + 12, (uint32_t)r->queue_id);
    put_u32(p + 16, (uint32_t)r->flag);
    put_u64(p + 20, (uint64_t)r->queue_offset);
    put_u64(p + 28, (uint64_t)r->physical_offset);
    put_u32(p + 36, (uint32_t)r->sys_flag);
    put_u64(p + 40, (uint64_t)r->born_ts);
    p += 48;
    memcpy(p, r->born_host, (size_t)r->born_len);
    p += r->born_len;
    put_u64(p, (uint64_t)r->store_ts);
    p += 8;
    memcpy(p, r->store_host, (size_t)r->store_len);
    p += r->store_len;
    put_u32(p, (uint32_t)r->reconsume);
    put_u64(p + 4, (uint64_t)r->prepared);
    put_u32(p + 12, (uint32_t)r->body_len);
    p += 16;
    memcpy(p, r->body, (size_t)r->body_len);
    p += r->body_len;
    *p++ = (unsigned char)r->topic_len;
    memcpy(p, r->topic, (size_t)r->topic_len);
    p += r->topic_len;
    p[0] = (unsigned char)(r->props_len >> 8);
    p[1] = (unsigned char)r->props_len;
    return p + 2;
}

#include "_crc32.h" /* (crc32_of: the body CRC its callers compute) */

#endif
