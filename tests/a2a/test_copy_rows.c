/*
 * nsp_copy_rows (src/attn_sp/copy_rows.c), the two-dimensional copy of the
 * mapped all-to-all's direct reads: through the cache and streamed around
 * it (non-temporal stores where the CPU has AVX), it must equal a byte loop
 * for every alignment of source and destination, row lengths below, at and
 * above a cache line and not a multiple of it, zero rows and zero-length
 * rows, and leave every byte between rows alone. Also the rule that chooses:
 * streamed from nsp_copy_stream_min_bytes() up, and only there.
 */
#include "attn_sp/copy_rows.h"
#include "../tap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 0x5a /* what the destination holds where nothing may be written */

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* One case: rows x row_len bytes from src (offset soff, stride sstride) to
 * dst (offset doff, stride dstride). Returns 0 when the copy equals the
 * byte loop and the gaps are untouched. */
static int one_case(size_t soff, size_t doff, size_t row_len, size_t rows, size_t sstride,
                    size_t dstride, int stream, uint64_t *rng)
{
    size_t         sbytes = soff + rows * sstride + 64, dbytes = doff + rows * dstride + 64;
    unsigned char *src = malloc(sbytes), *got = malloc(dbytes), *want = malloc(dbytes);
    int            bad = 0;

    if (src == NULL || got == NULL || want == NULL) {
        free(src);
        free(got);
        free(want);
        return 1;
    }
    for (size_t i = 0; i < sbytes; ++i) {
        src[i] = (unsigned char)next(rng);
    }
    memset(got, GUARD, dbytes);
    memset(want, GUARD, dbytes);
    for (size_t t = 0; t < rows; ++t) {
        for (size_t b = 0; b < row_len; ++b) {
            want[doff + t * dstride + b] = src[soff + t * sstride + b];
        }
    }
    nsp_copy_rows(got + doff, dstride, src + soff, sstride, row_len, rows, stream);
    bad = memcmp(got, want, dbytes) != 0;
    free(src);
    free(got);
    free(want);
    return bad;
}

static void test_shapes(int stream)
{
    static const size_t lens[] = {0, 1, 31, 32, 63, 64, 65, 127, 128, 134, 200, 256, 1000, 1024,
                                  4096 + 3};
    uint64_t rng = stream ? 77 : 78;
    int      cases = 0, bad = 0;

    for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); ++k) {
        for (size_t soff = 0; soff < 64; soff += 7) {
            for (size_t doff = 0; doff < 64; doff += 5) {
                size_t len = lens[k], rows = 1 + (size_t)(next(&rng) % 9);
                size_t sstride = len + (size_t)(next(&rng) % 3) * 64 + (next(&rng) % 2);
                size_t dstride = len + (size_t)(next(&rng) % 2) * 3;
                bad += one_case(soff, doff, len, rows, sstride, dstride, stream, &rng);
                ++cases;
            }
        }
    }
    bad += one_case(3, 5, 100, 0, 128, 100, stream, &rng); /* no rows: nothing written */
    cases++;
    tap_is_int(bad, 0, "%s: %d shapes (row lengths 0-4099 bytes, every source/destination "
               "offset mod 64 in steps of 7/5, gaps between rows) equal a byte loop and leave "
               "the gaps alone", stream ? "streamed around the cache" : "through the cache",
               cases);
}

/* One large copy, as the mapped path makes it: 4 MiB of 1 KiB rows read
 * at an 8 KiB stride. */
static void test_large(void)
{
    uint64_t rng = 99;
    tap_is_int(one_case(0, 0, 1024, 4096, 8192, 1024, 1, &rng) +
                   one_case(16, 48, 1000, 4096, 8200, 1000, 1, &rng),
               0, "streamed: 4 MiB of 1 KiB rows at an 8 KiB source stride, aligned and not, "
               "equal a byte loop");
}

static void test_rule(void)
{
    size_t m = nsp_copy_stream_min_bytes();

    tap_ok(m > 0 && nsp_copy_should_stream(m) && nsp_copy_should_stream(m * 8) &&
               !nsp_copy_should_stream(m - 1) && !nsp_copy_should_stream(0),
           "the rule streams from %zu bytes of output up, and not below", m);
}

int main(void)
{
    test_shapes(0);
    test_shapes(1);
    test_large();
    test_rule();
    return tap_done();
}
