/*
 * Workloads (docs/design.md §5.3): length files, one document length per line, and
 * the seeded batch sampler. The generator is splitmix64 (pure uint64
 * arithmetic), so a (seed, batch) pair gives the same batch on every platform.
 */
#include "common/log.h"
#include "nspcomm.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct nsp_workload {
    int64_t *lens;    /* [count] document lengths, tokens, > 0 */
    size_t   count;
};

/* Read the whole file into a NUL-terminated buffer (*len bytes before it). */
static nsp_status_t read_file(const char *path, char **text, size_t *len)
{
    FILE        *f = fopen(path, "rb");
    char        *buf = NULL;
    size_t       cap = 0, n = 0;
    nsp_status_t status = NSP_OK;

    if (f == NULL) {
        return nsp_error(NSP_ERR_IO, "cannot open workload file %s: %s", path, strerror(errno));
    }
    for (;;) {
        size_t got;
        if (cap - n < 2) {
            char *nb = realloc(buf, cap ? cap * 2 : 1 << 20);
            if (nb == NULL) {
                status = nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate memory to read %s", path);
                goto out_close;
            }
            buf = nb;
            cap = cap ? cap * 2 : 1 << 20;
        }
        got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) {
            break;
        }
    }
    if (ferror(f)) {
        status = nsp_error(NSP_ERR_IO, "cannot read workload file %s: %s", path, strerror(errno));
        goto out_close;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    buf = NULL;

out_close:
    free(buf);
    fclose(f);
    return status;
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Parse one line [start, end) (no newline) into *value; *value = 0 for a
 * blank or comment line. */
static nsp_status_t parse_line(const char *path, int lineno, const char *start,
                               const char *end, int64_t *value)
{
    const char *p = start, *digits;
    int         negative = 0;
    int64_t     acc = 0;

    while (p < end && is_blank(*p)) {
        ++p;
    }
    while (end > p && is_blank(end[-1])) {
        --end;
    }
    *value = 0;
    if (p == end || *p == '#') {
        return NSP_OK;
    }
    if (*p == '+' || *p == '-') {
        negative = (*p == '-');
        ++p;
    }
    digits = p;
    while (p < end && *p >= '0' && *p <= '9') {
        int d = *p - '0';
        if (acc > (INT64_MAX - d) / 10) {
            return nsp_error(NSP_ERR_PARSE, "%s:%d: length \"%.*s\" is too large", path, lineno,
                             (int)(end - start > 40 ? 40 : end - start), start);
        }
        acc = acc * 10 + d;
        ++p;
    }
    if (p == digits || p != end) {
        return nsp_error(NSP_ERR_PARSE, "%s:%d: \"%.*s\" is not a length (expected one "
                         "positive integer per line; '#' starts a comment line)", path, lineno,
                         (int)(end - start > 40 ? 40 : end - start), start);
    }
    if (negative || acc == 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s:%d: length %s%lld is not positive; every "
                         "sequence needs at least one token", path, lineno,
                         negative && acc != 0 ? "-" : "", (long long)acc);
    }
    *value = acc;
    return NSP_OK;
}

nsp_status_t nsp_workload_load(const char *path, nsp_workload_t **workload_p)
{
    nsp_workload_t *wl;
    char           *text = NULL;
    size_t          len = 0, cap = 0;
    int             lineno = 0;
    nsp_status_t    status;

    if (path == NULL || workload_p == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_workload_load: NULL argument");
    }
    wl = calloc(1, sizeof(*wl));
    if (wl == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate a workload");
    }
    NSP_CHECK_GOTO(read_file(path, &text, &len), status, err_free_wl);
    for (const char *line = text; line < text + len;) {
        const char *nl = memchr(line, '\n', (size_t)(text + len - line));
        const char *end = nl ? nl : text + len;
        int64_t     value;

        ++lineno;
        if (memchr(line, '\0', (size_t)(end - line)) != NULL) {
            status = nsp_error(NSP_ERR_PARSE, "%s:%d: NUL byte (not a text file?)", path, lineno);
            goto err_free_text;
        }
        NSP_CHECK_GOTO(parse_line(path, lineno, line, end, &value), status, err_free_text);
        if (value > 0) {
            if (wl->count == cap) {
                int64_t *nl_lens = realloc(wl->lens, sizeof(int64_t) * (cap ? cap * 2 : 4096));
                if (nl_lens == NULL) {
                    status = nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate the lengths of %s",
                                       path);
                    goto err_free_text;
                }
                wl->lens = nl_lens;
                cap = cap ? cap * 2 : 4096;
            }
            wl->lens[wl->count++] = value;
        }
        line = end + 1;
    }
    if (wl->count == 0) {
        status = nsp_error(NSP_ERR_PARSE, "%s: no lengths in the file (%d lines); expected one "
                           "positive integer per line", path, lineno);
        goto err_free_text;
    }
    free(text);
    NSP_DEBUG("workload %s: %zu lengths", path, wl->count);
    *workload_p = wl;
    return NSP_OK;

err_free_text:
    free(text);
err_free_wl:
    nsp_workload_free(wl);
    return status;
}

size_t nsp_workload_count(const nsp_workload_t *workload)
{
    return workload != NULL ? workload->count : 0;
}

void nsp_workload_free(nsp_workload_t *workload)
{
    if (workload == NULL) {
        return;
    }
    free(workload->lens);
    free(workload);
}

/* splitmix64 (Steele, Lea, Flood 2014): one 64-bit output per call. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) without modulo bias: reject the low (2^64 mod n) outputs. */
static uint64_t uniform_below(uint64_t *state, uint64_t n)
{
    uint64_t threshold = (0 - n) % n;
    uint64_t r;

    do {
        r = splitmix64(state);
    } while (r < threshold);
    return r % n;
}

/* Append one length to a growing array. */
static nsp_status_t push_len(int64_t **lens, size_t *count, size_t *cap, int64_t value)
{
    if (*count == *cap) {
        size_t   ncap = *cap ? *cap * 2 : 1024;
        int64_t *nl = realloc(*lens, ncap * sizeof(int64_t));
        if (nl == NULL) {
            return nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate a batch of %zu sequences", ncap);
        }
        *lens = nl;
        *cap = ncap;
    }
    (*lens)[(*count)++] = value;
    return NSP_OK;
}

nsp_status_t nsp_workload_sample(const nsp_workload_t *workload, uint64_t seed,
                                 int batch_index, int64_t token_budget, int64_t max_len,
                                 int64_t **lens_p, int *nseqs_p)
{
    int64_t     *lens = NULL;
    size_t       count = 0, cap = 0;
    int64_t      remaining = token_budget;
    uint64_t     state;
    nsp_status_t status;

    if (workload == NULL || lens_p == NULL || nseqs_p == NULL || workload->count == 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_workload_sample: NULL or empty workload");
    }
    if (batch_index < 0 || token_budget < 1 || max_len < 1) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_workload_sample: batch_index=%d, "
                         "token_budget=%lld and max_len=%lld must be >= 0, >= 1 and >= 1",
                         batch_index, (long long)token_budget, (long long)max_len);
    }
    /* One stream per (seed, batch): mix the seed, then the batch index. */
    state = seed;
    state = splitmix64(&state) ^ ((uint64_t)batch_index * 0xd1b54a32d192ed03ull);
    (void)splitmix64(&state);
    while (remaining > 0) {
        int64_t take = workload->lens[uniform_below(&state, workload->count)];

        if (take > remaining) {
            take = remaining;   /* land exactly on the budget */
        }
        remaining -= take;
        /* A document longer than the context becomes pieces of max_len and a rest. */
        while (take > 0) {
            int64_t piece = take < max_len ? take : max_len;
            NSP_CHECK_GOTO(push_len(&lens, &count, &cap, piece), status, err_free_lens);
            take -= piece;
        }
        if (count > NSP_MAX_BATCH_SEQS) {
            status = nsp_error(NSP_ERR_INVALID_ARG, "a batch of %lld tokens has more than "
                               "%d sequences (NSP_MAX_BATCH_SEQS); lower the token budget",
                               (long long)token_budget, NSP_MAX_BATCH_SEQS);
            goto err_free_lens;
        }
    }
    *lens_p = lens;
    *nseqs_p = (int)count;
    return NSP_OK;

err_free_lens:
    free(lens);
    return status;
}
