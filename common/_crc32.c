/*
 * RocketMQ's body CRC: zlib's CRC-32 (ISO-HDLC, reflected polynomial 0xEDB88320), which the
 * callers store with the top bit cleared. Every put computes it over the whole body, so it is
 * on the hot path of every send: ~0.25 µs for a 1 KiB body by table lookups, about 3 % of the
 * broker's CPU a send (docs/benchmarks.md, session 27).
 *
 * Two ways, the same result:
 * - slicing by 16: sixteen table lookups for each 16 bytes (zlib's own speed); everywhere;
 * - folding with carry-less multiplication (x86-64 with PCLMULQDQ and SSE4.1, asked of the CPU
 *   at import): four 16-byte lanes are multiplied forward by x^512 (mod P) and xor-ed with the
 *   next 64 bytes, then folded into one lane, reduced to 64 and 32 bits and finished with a
 *   Barrett reduction, as in Intel's "Fast CRC Computation for Generic Polynomials Using
 *   PCLMULQDQ Instruction" (2009). The constants below are x^k mod P for that paper's k, in
 *   its bit-reflected form, and P and floor(x^64 / P) for the Barrett step.
 * ROCKETDESK_CRC=table in the environment keeps the table (to compare the two); the tests hold
 * both to zlib (tests/unit/storage/test_crc32.py).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_crc32.h"

static uint32_t crc_table[16][256];

static inline uint32_t
le32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* The running register (no pre- or post-inversion) over n bytes, by the tables. */
static uint32_t
crc32_tables(uint32_t c, const unsigned char *p, Py_ssize_t n)
{
    while (n >= 16) {
        uint32_t a = c ^ le32(p), b = le32(p + 4), d = le32(p + 8), e = le32(p + 12);
        c = crc_table[15][a & 0xFF] ^ crc_table[14][(a >> 8) & 0xFF]
            ^ crc_table[13][(a >> 16) & 0xFF] ^ crc_table[12][a >> 24]
            ^ crc_table[11][b & 0xFF] ^ crc_table[10][(b >> 8) & 0xFF]
            ^ crc_table[9][(b >> 16) & 0xFF] ^ crc_table[8][b >> 24]
            ^ crc_table[7][d & 0xFF] ^ crc_table[6][(d >> 8) & 0xFF]
            ^ crc_table[5][(d >> 16) & 0xFF] ^ crc_table[4][d >> 24]
            ^ crc_table[3][e & 0xFF] ^ crc_table[2][(e >> 8) & 0xFF]
            ^ crc_table[1][(e >> 16) & 0xFF] ^ crc_table[0][e >> 24];
        p += 16;
        n -= 16;
    }
    while (n-- > 0)
        c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

/* GCC and Clang on x86-64, where a function may target PCLMULQDQ and SSE4.1 alone; not
 * clang-cl (its immintrin.h leaves those out without -mpclmul), nor MSVC: the tables there. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(_MSC_VER)
#define CRC_FOLDING 1
#include <cpuid.h>
#include <immintrin.h>

#define FOLDING __attribute__((target("pclmul,sse4.1")))

/* One lane times its constant pair (low half by the low constant, high by the high), plus
 * the data 64 or 16 bytes on. */
FOLDING static inline __m128i
fold(__m128i lane, __m128i k, __m128i next)
{
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(lane, k, 0x00),
                                       _mm_clmulepi64_si128(lane, k, 0x11)),
                         next);
}

/* The running register over the first n - n % 16 bytes (n >= 64); *used says how many. */
FOLDING static uint32_t
crc32_folded(uint32_t c, const unsigned char *p, Py_ssize_t n, Py_ssize_t *used)
{
    /* x^(4*128+32) and x^(4*128-32) mod P; x^(128+32) and x^(128-32); x^64; P, floor(x^64/P):
     * bit-reflected, each in the half of its register the multiplications below take. */
    const __m128i by_64_bytes = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);
    const __m128i by_16_bytes = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    const __m128i to_32 = _mm_set_epi64x(0, 0x163cd6124LL);
    const __m128i barrett = _mm_set_epi64x(0x1f7011641LL, 0x1db710641LL);
    const __m128i low32 = _mm_set_epi32(0, 0, 0, -1);
    const unsigned char *start = p;

    __m128i x1 = _mm_loadu_si128((const __m128i *)p);
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(p + 48));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)c));
    p += 64;
    n -= 64;
    while (n >= 64) {
        x1 = fold(x1, by_64_bytes, _mm_loadu_si128((const __m128i *)p));
        x2 = fold(x2, by_64_bytes, _mm_loadu_si128((const __m128i *)(p + 16)));
        x3 = fold(x3, by_64_bytes, _mm_loadu_si128((const __m128i *)(p + 32)));
        x4 = fold(x4, by_64_bytes, _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        n -= 64;
    }
    x1 = fold(x1, by_16_bytes, x2);
    x1 = fold(x1, by_16_bytes, x3);
    x1 = fold(x1, by_16_bytes, x4);
    while (n >= 16) {
        x1 = fold(x1, by_16_bytes, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    /* 128 bits to 64 (with the 32 zero bits a CRC appends), then to 32 ... */
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), _mm_clmulepi64_si128(by_16_bytes, x1, 0x01));
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 4),
                       _mm_clmulepi64_si128(_mm_and_si128(x1, low32), to_32, 0x00));
    /* ... and the remainder by Barrett's reduction. */
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), barrett, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), barrett, 0x00);
    *used = p - start;
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(x1, t), 1);
}
#endif

static int use_folding = 0;

void
crc32_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 16; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
#ifdef CRC_FOLDING
    /* CPUID leaf 1, ECX: bit 1 PCLMULQDQ, bit 19 SSE4.1. (<cpuid.h> needs no runtime library,
     * unlike __builtin_cpu_supports, whose __cpu_model some toolchains do not link.) */
    unsigned int eax, ebx, ecx, edx;
    const char *choice = getenv("ROCKETDESK_CRC");
    use_folding = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 1))
        && (ecx & (1u << 19)) && !(choice != NULL && strcmp(choice, "table") == 0);
#endif
}

const char *
crc32_kernel(void)
{
    return use_folding ? "pclmul" : "table";
}

uint32_t
crc32_of_tables(const unsigned char *p, Py_ssize_t n)
{
    return crc32_tables(0xFFFFFFFFu, p, n) ^ 0xFFFFFFFFu;
}

uint32_t
crc32_of(const unsigned char *p, Py_ssize_t n)
{
    uint32_t c = 0xFFFFFFFFu;
#ifdef CRC_FOLDING
    if (use_folding && n >= 64) {
        Py_ssize_t used;
        c = crc32_folded(c, p, n, &used);
        p += used;
        n -= used;
    }
#endif
    return crc32_tables(c, p, n) ^ 0xFFFFFFFFu;
}
