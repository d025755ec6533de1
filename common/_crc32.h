/*
 * RocketMQ's body CRC (common/_crc32.c): zlib's CRC-32; callers clear the top bit.
 */
#ifndef ROCKETDESK_CRC32_H
#define ROCKETDESK_CRC32_H

#include <Python.h>
#include <stdint.h>

/* Make the tables and pick the way (call once, at the module's import). */
void crc32_init(void);

/* The way in use: "pclmul" or "table". */
const char *crc32_kernel(void);

/* The CRC of n bytes, by the way in use; and by the tables alone (to hold the two together). */
uint32_t crc32_of(const unsigned char *p, Py_ssize_t n);
uint32_t crc32_of_tables(const unsigned char *p, Py_ssize_t n);

#endif
