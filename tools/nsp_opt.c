/* The checked option parser of the tools; see nsp_opt.h. */
#include "nsp_opt.h"

#include "common/log.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Print "prog: opt text: why" on stderr, keep it as the last error. */
static nsp_status_t opt_bad(const char *prog, const char *opt, const char *text,
                            const char *fmt, ...) NSP_PRINTF_(4, 5);

static nsp_status_t opt_bad(const char *prog, const char *opt, const char *text,
                            const char *fmt, ...)
{
    char    why[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s %s: %s\n", prog, opt, text, why);
    return nsp_error_quiet(NSP_ERR_INVALID_ARG, "%s %s: %s", opt, text, why);
}

/* Text a number may be: not empty, no blank at either end. */
static int opt_trimmed(const char *text)
{
    size_t n = text != NULL ? strlen(text) : 0;

    return n > 0 && !isspace((unsigned char)text[0]) && !isspace((unsigned char)text[n - 1]);
}

/* A finite double of the whole text (0), or -1. */
static int opt_strtod(const char *text, double *v)
{
    char *end;

    errno = 0;
    *v    = strtod(text, &end);
    return opt_trimmed(text) && end != text && *end == '\0' && isfinite(*v) ? 0 : -1;
}

/* A whole number, exactly (digits) or in exponent form; as a long double so
 * the range check sees 9e18 and 1e30 as they are. 0, or -1 if not whole. */
static int opt_whole(const char *text, long double *v)
{
    char     *end;
    long long ll;
    double    d;

    if (!opt_trimmed(text)) {
        return -1;
    }
    errno = 0;
    ll    = strtoll(text, &end, 10);
    if (end != text && *end == '\0') {
        /* ERANGE: out of int64, so out of any bound; keep the sign */
        *v = errno == ERANGE ? (ll < 0 ? -1e30L : 1e30L) : (long double)ll;
        return 0;
    }
    if (strpbrk(text, "eE") == NULL || opt_strtod(text, &d) != 0 || d != floor(d)) {
        return -1;
    }
    *v = (long double)d;
    return 0;
}

nsp_status_t nsp_opt_i64(const char *prog, const char *opt, const char *text, int64_t lo,
                         int64_t hi, int64_t *out)
{
    long double v;

    if (opt_whole(text, &v) != 0 || v < (long double)lo || v > (long double)hi) {
        return opt_bad(prog, opt, text, "expected an integer in %lld..%lld", (long long)lo,
                       (long long)hi);
    }
    *out = (int64_t)v;
    return NSP_OK;
}

nsp_status_t nsp_opt_int(const char *prog, const char *opt, const char *text, int lo, int hi,
                         int *out)
{
    int64_t v;

    NSP_CHECK(nsp_opt_i64(prog, opt, text, lo, hi, &v));
    *out = (int)v;
    return NSP_OK;
}

nsp_status_t nsp_opt_u64(const char *prog, const char *opt, const char *text, uint64_t lo,
                         uint64_t hi, uint64_t *out)
{
    char              *end;
    unsigned long long v;

    errno = 0;
    v     = opt_trimmed(text) && isdigit((unsigned char)text[0]) ? strtoull(text, &end, 10) : 0;
    if (!opt_trimmed(text) || !isdigit((unsigned char)text[0]) || errno != 0 || *end != '\0' ||
        v < lo || v > hi) {
        return opt_bad(prog, opt, text, "expected an integer in %llu..%llu",
                       (unsigned long long)lo, (unsigned long long)hi);
    }
    *out = v;
    return NSP_OK;
}

nsp_status_t nsp_opt_double(const char *prog, const char *opt, const char *text, double lo,
                            double hi, unsigned flags, double *out)
{
    const int open = (flags & NSP_OPT_LO_OPEN) != 0;
    double    v;

    if (opt_strtod(text, &v) != 0 || (open ? !(v > lo) : !(v >= lo)) || !(v <= hi)) {
        return opt_bad(prog, opt, text, "expected a number in %s%g, %g]", open ? "(" : "[", lo,
                       hi);
    }
    *out = v;
    return NSP_OK;
}

/* The multiplier of a size suffix ("", K, M, G, T, then "", B or iB), or 0. */
static double size_unit(const char *s)
{
    static const char units[] = "KMGT";
    const char       *u       = *s != '\0' ? strchr(units, toupper((unsigned char)*s)) : NULL;
    double            mult    = 1.0;

    if (u != NULL) {
        mult = ldexp(1.0, 10 * (int)(u - units + 1));
        ++s;
        if (*s == 'i') {
            ++s;
            if (*s != 'B') {
                return 0;
            }
        }
    }
    if (*s == 'B' || *s == 'b') {
        ++s;
    }
    return *s == '\0' ? mult : 0;
}

nsp_status_t nsp_opt_size(const char *prog, const char *opt, const char *text, size_t lo,
                          size_t hi, size_t *out)
{
    char   buf[64], *end = NULL;
    double v = 0, mult = 0;

    if (opt_trimmed(text) && strlen(text) < sizeof(buf)) {
        snprintf(buf, sizeof(buf), "%s", text);
        errno = 0;
        v     = strtod(buf, &end);
        mult  = end != buf && isfinite(v) ? size_unit(end) : 0;
    }
    v *= mult;
    if (mult == 0 || v != floor(v) || !(v >= (double)lo) || !(v <= (double)hi)) {
        return opt_bad(prog, opt, text, "expected a whole number of bytes in %zu..%zu (K, M, G "
                       "and T suffixes: x 1024^k)", lo, hi);
    }
    *out = (size_t)v;
    return NSP_OK;
}

/* "a, b, c" into buf[len]. */
static const char *names_str(const char *const *names, int n, char *buf, size_t len)
{
    size_t at = 0;

    buf[0] = '\0';
    for (int k = 0; k < n && at < len; ++k) {
        at += (size_t)snprintf(buf + at, len - at, "%s%s", k > 0 ? ", " : "", names[k]);
    }
    return buf;
}

static int name_index(const char *s, size_t len, const char *const *names, int n)
{
    for (int k = 0; k < n; ++k) {
        if (strlen(names[k]) == len && strncmp(s, names[k], len) == 0) {
            return k;
        }
    }
    return -1;
}

nsp_status_t nsp_opt_choice(const char *prog, const char *opt, const char *text,
                            const char *const *names, int n, int *out)
{
    char known[512];
    int  k = text != NULL ? name_index(text, strlen(text), names, n) : -1;

    if (k < 0) {
        return opt_bad(prog, opt, text != NULL ? text : "", "expected one of: %s",
                       names_str(names, n, known, sizeof(known)));
    }
    *out = k;
    return NSP_OK;
}

nsp_status_t nsp_opt_list(const char *prog, const char *opt, const char *text,
                          const char *const *names, int n, uint32_t *mask)
{
    char        known[512];
    uint32_t    m = 0;
    const char *p = text != NULL ? text : "";

    names_str(names, n < 32 ? n : 32, known, sizeof(known));
    for (;;) {
        size_t len = strcspn(p, ",");
        int    k   = name_index(p, len, names, n < 32 ? n : 32);
        if (k < 0) {
            return opt_bad(prog, opt, text != NULL ? text : "", "'%.*s' is not one of: %s",
                           (int)len, p, known);
        }
        if (m & (1u << k)) {
            return opt_bad(prog, opt, text, "'%s' is given twice", names[k]);
        }
        m |= 1u << k;
        if (p[len] == '\0') {
            break;
        }
        p += len + 1;
    }
    *mask = m;
    return NSP_OK;
}

/* The directory part of path into dir[len] ("." when there is none). */
static void dir_of(const char *path, char *dir, size_t len)
{
    const char *slash = strrchr(path, '/');

    if (slash == NULL) {
        snprintf(dir, len, ".");
    } else if (slash == path) {
        snprintf(dir, len, "/");
    } else {
        snprintf(dir, len, "%.*s", (int)(slash - path), path);
    }
}

nsp_status_t nsp_opt_out_path(const char *prog, const char *opt, const char *path)
{
    char        dir[PATH_MAX];
    struct stat st;

    if (path == NULL || path[0] == '\0' || path[strlen(path) - 1] == '/') {
        return opt_bad(prog, opt, path != NULL ? path : "", "expected a file name to write");
    }
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode) || access(path, W_OK) != 0) {
            return opt_bad(prog, opt, path, "cannot write it: %s",
                           S_ISDIR(st.st_mode) ? "it is a directory" : strerror(errno));
        }
        return NSP_OK;
    }
    dir_of(path, dir, sizeof(dir));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        return opt_bad(prog, opt, path, "cannot write it: directory %s does not exist", dir);
    }
    if (access(dir, W_OK | X_OK) != 0) {
        return opt_bad(prog, opt, path, "cannot write it: directory %s: %s", dir,
                       strerror(errno));
    }
    return NSP_OK;
}

nsp_status_t nsp_opt_in_path(const char *prog, const char *opt, const char *path)
{
    struct stat st;

    if (path == NULL || stat(path, &st) != 0) {
        return opt_bad(prog, opt, path != NULL ? path : "", "cannot read it: %s",
                       strerror(errno));
    }
    if (!S_ISREG(st.st_mode) || access(path, R_OK) != 0) {
        return opt_bad(prog, opt, path, "cannot read it: %s",
                       S_ISREG(st.st_mode) ? strerror(errno) : "not a regular file");
    }
    return NSP_OK;
}

const char *nsp_opt_bytes_str(double bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int                      u       = 0;

    while (bytes >= 1024.0 && u < 6) {
        bytes /= 1024.0;
        ++u;
    }
    snprintf(buf, len, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
    return buf;
}

/* The memory a tool may ask for: NSPCOMM_TOOL_MEM_LIMIT, else physical memory. */
static double mem_limit(const char **source)
{
    const char *env = getenv("NSPCOMM_TOOL_MEM_LIMIT");
    long        pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t      v;

    if (env != NULL && env[0] != '\0' &&
        nsp_opt_size("nspcomm", "NSPCOMM_TOOL_MEM_LIMIT", env, 1, SIZE_MAX, &v) == NSP_OK) {
        *source = "NSPCOMM_TOOL_MEM_LIMIT";
        return (double)v;
    }
    *source = "physical memory";
    return pages > 0 && page > 0 ? (double)pages * (double)page : 16.0 * 1073741824.0;
}

nsp_status_t nsp_opt_mem_check(const char *prog, const char *what, double bytes)
{
    const char *source;
    double      limit = mem_limit(&source);
    char        need[32], have[32];

    if (bytes <= limit) {
        return NSP_OK;
    }
    nsp_opt_bytes_str(bytes, need, sizeof(need));
    nsp_opt_bytes_str(limit, have, sizeof(have));
    fprintf(stderr, "%s: %s needs about %s, more than the limit of %s (%s): ask for less\n",
            prog, what, need, have, source);
    return nsp_error_quiet(NSP_ERR_NO_MEMORY, "%s needs about %s, more than the limit of %s "
                           "(%s)", what, need, have, source);
}

nsp_status_t nsp_opt_batch_check(const char *prog, const char *what, const nsp_workload_t *wl,
                                 uint64_t seed, int64_t max_len, double tokens, int64_t seqs,
                                 int ranks, int nplanners)
{
    const int64_t probe = (int64_t)1 << 20;
    int64_t      *lens  = NULL;
    int           n     = 0;
    double        nseq  = (double)seqs, bytes;
    char          about[320];

    if (seqs <= 0) {
        NSP_CHECK(nsp_workload_sample(wl, seed, 0, probe, max_len, &lens, &n));
        free(lens);
        nseq = tokens * n / (double)probe;
    }
    snprintf(about, sizeof(about), "%s (about %.3g sequences per batch)", what, nseq);
    if (nseq > NSP_MAX_BATCH_SEQS) {
        fprintf(stderr, "%s: %s: more than the %d sequences a batch may hold "
                "(NSP_MAX_BATCH_SEQS): ask for fewer\n", prog, about, NSP_MAX_BATCH_SEQS);
        return nsp_error_quiet(NSP_ERR_INVALID_ARG, "%s: more than NSP_MAX_BATCH_SEQS", about);
    }
    bytes = nseq * (8.0 + 64.0 * nplanners) + 4096.0 * ranks * nplanners;
    return nsp_opt_mem_check(prog, about, bytes);
}
