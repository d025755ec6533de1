/*
 * An index file's layout where the compiled core writes it (common/_storecore.c for one
 * message's keys, common/_dispatch_run.c for a run's): a 40-byte header, 4-byte hash slots,
 * 20-byte entries (key hash, CommitLog offset, seconds after the file's begin, previous entry
 * of the slot), as storage/index_file.py's IndexFile.put_key_hash writes them. Header-only.
 */
#ifndef ROCKETDESK_INDEX_ENTRY_H
#define ROCKETDESK_INDEX_ENTRY_H

#include <stdint.h>

#include "_bytes.h"

#define INDEX_HEADER_SIZE 40
#define INDEX_ENTRY_SIZE 20

/* The index's non-negative key hash from Java's hashCode of topic#key: abs, with
 * Integer.MIN_VALUE as 0. */
static inline int64_t
index_key_hash_of(uint32_t h)
{
    if (h == 0x80000000u)
        return 0;
    return (h & 0x80000000u) ? (int64_t)(0x100000000ull - h) : (int64_t)h;
}

/* Entry number `index_count` for a key, its slot pointed at it (the entry the slot held before
 * chained behind it, when that one is of this file's count); 1 when the slot was empty. The
 * caller has checked that the entry fits the mapping. */
static inline int
index_put_entry(unsigned char *buf, int64_t slot_num, int64_t index_count, int64_t key_hash,
                int64_t phy_offset, int64_t time_diff)
{
    unsigned char *slot = buf + INDEX_HEADER_SIZE + (key_hash % slot_num) * 4;
    int64_t previous = (int32_t)get_u32(slot);
    if (previous <= 0 || previous > index_count)
        previous = 0;
    unsigned char *entry = buf + INDEX_HEADER_SIZE + slot_num * 4 + index_count * INDEX_ENTRY_SIZE;
    put_u32(entry, (uint32_t)key_hash);
    put_u64(entry + 4, (uint64_t)phy_offset);
    put_u32(entry + 12, (uint32_t)time_diff);
    put_u32(entry + 16, (uint32_t)previous);
    put_u32(slot, (uint32_t)index_count);
    return previous == 0;
}

#endif
