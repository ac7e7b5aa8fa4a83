/* Length files and the batch sampler (docs/design.md §5.3). */
#include "common/log.h"
#include "random_plan.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int msg_has(const char *words)
{
    if (strstr(nsp_last_error(), words) != NULL) {
        return 1;
    }
    tap_diag("message \"%s\" lacks \"%s\"", nsp_last_error(), words);
    return 0;
}

static nsp_workload_t *load_text(const char *text)
{
    const char     *path = rp_temp_file(text);
    nsp_workload_t *wl = NULL;

    if (path == NULL || nsp_workload_load(path, &wl) != NSP_OK) {
        wl = NULL;
    }
    if (path != NULL) {
        unlink(path);
    }
    return wl;
}

static void test_load(void)
{
    nsp_workload_t *wl = load_text("# lengths\n100\n\n  200  \r\n300\r\n\t# indented comment\n+7\n"
                                   "400");
    tap_ok(wl != NULL && nsp_workload_count(wl) == 5,
           "comments, blank lines, CRLF, spaces, a '+' and no final newline");
    nsp_workload_free(wl);
    nsp_workload_free(NULL);
    tap_is_int((int64_t)nsp_workload_count(NULL), 0, "count of NULL is 0");
}

typedef struct bad_line {
    const char  *text;
    nsp_status_t status;
    int          line;
    const char  *words;
} bad_line_t;

static void test_bad_lines(void)
{
    static const bad_line_t cases[] = {
        {"10\n20\n12abc\n", NSP_ERR_PARSE, 3, "12abc"},
        {"10\n0\n", NSP_ERR_INVALID_ARG, 2, "not positive"},
        {"# c\n\n-5\n", NSP_ERR_INVALID_ARG, 3, "-5"},
        {"1.5\n", NSP_ERR_PARSE, 1, "1.5"},
        {"10 20\n", NSP_ERR_PARSE, 1, "10 20"},
        {"1\n99999999999999999999\n", NSP_ERR_PARSE, 2, "too large"},
        {"1\n2\n-\n", NSP_ERR_PARSE, 3, "not a length"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        const char     *path = rp_temp_file(cases[i].text);
        nsp_workload_t *wl = NULL;
        char            where[128];
        nsp_status_t    st;

        if (path == NULL) {
            tap_ok(0, "temporary file");
            continue;
        }
        st = nsp_workload_load(path, &wl);
        snprintf(where, sizeof(where), "%s:%d:", path, cases[i].line);
        tap_ok(st == cases[i].status && wl == NULL && strstr(nsp_last_error(), where) != NULL &&
               msg_has(cases[i].words), "bad workload %zu: %s naming file:line %d and '%s'", i,
               nsp_status_string(cases[i].status), cases[i].line, cases[i].words);
        unlink(path);
    }
    {
        const char     *path = rp_temp_file("# only a comment\n\n");
        nsp_workload_t *wl = NULL;
        tap_ok(path != NULL && nsp_workload_load(path, &wl) == NSP_ERR_PARSE && msg_has(path) &&
               msg_has("no lengths"), "a file without lengths is NSP_ERR_PARSE");
        if (path != NULL) {
            unlink(path);
        }
    }
    {
        nsp_workload_t *wl = NULL;
        tap_ok(nsp_workload_load("/nonexistent/w.txt", &wl) == NSP_ERR_IO &&
               msg_has("/nonexistent/w.txt"), "a missing file is NSP_ERR_IO naming it");
    }
}

static int64_t sum(const int64_t *v, int n)
{
    int64_t s = 0;

    for (int i = 0; i < n; ++i) {
        s += v[i];
    }
    return s;
}

static void test_cutting(void)
{
    static const int64_t want[] = {300, 300, 300, 100, 300, 300, 300, 100, 300, 200};
    nsp_workload_t      *wl = load_text("1000\n");
    int64_t             *lens = NULL;
    int                  n = 0;

    if (!tap_ok(wl != NULL, "single-length workload")) {
        return;
    }
    tap_is_int(nsp_workload_sample(wl, 1, 0, 2500, 300, &lens, &n), NSP_OK, "sample");
    tap_ok(n == 10 && memcmp(lens, want, sizeof(want)) == 0,
           "documents of 1000 with max_len 300 and budget 2500: 300,300,300,100 twice, then "
           "the last cut to the budget (300, 200)");
    free(lens);
    tap_is_int(nsp_workload_sample(wl, 1, 0, 0, 300, &lens, &n), NSP_ERR_INVALID_ARG,
               "budget 0 is invalid");
    tap_is_int(nsp_workload_sample(wl, 1, 0, 10, 0, &lens, &n), NSP_ERR_INVALID_ARG,
               "max_len 0 is invalid");
    tap_is_int(nsp_workload_sample(wl, 1, -1, 10, 10, &lens, &n), NSP_ERR_INVALID_ARG,
               "a negative batch index is invalid");
    tap_is_int(nsp_workload_sample(NULL, 1, 0, 10, 10, &lens, &n), NSP_ERR_INVALID_ARG,
               "NULL workload");
    nsp_workload_free(wl);
}

static void test_reproducible(void)
{
    /* Pinned output: the generator is pure uint64 arithmetic, so this holds
     * on every platform (an independent Python splitmix64 gives the same).
     * Changing the sampler changes every published table. */
    static const int64_t golden[] = {9, 2, 2, 1, 4, 5, 7, 8, 6, 2, 4, 3, 8, 6, 8, 10, 10, 5};
    nsp_workload_t      *wl = load_text("1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n");
    int64_t             *a = NULL, *b = NULL, *c = NULL;
    int                  na = 0, nb = 0, nc = 0;
    int64_t              total = 0;

    if (!tap_ok(wl != NULL, "workload 1..10")) {
        return;
    }
    nsp_workload_sample(wl, 42, 3, 100, 1000, &a, &na);
    nsp_workload_sample(wl, 42, 3, 100, 1000, &b, &nb);
    nsp_workload_sample(wl, 42, 4, 100, 1000, &c, &nc);
    tap_ok(na == nb && memcmp(a, b, sizeof(int64_t) * (size_t)na) == 0,
           "same (seed, batch) gives the same batch");
    tap_ok(na != nc || memcmp(a, c, sizeof(int64_t) * (size_t)na) != 0,
           "another batch index gives another batch");
    tap_is_int(sum(a, na), 100, "the batch lands exactly on the budget");
    if (!tap_ok(na == (int)(sizeof(golden) / sizeof(golden[0])) &&
                memcmp(a, golden, sizeof(golden)) == 0, "seed 42, batch 3 gives the pinned batch")) {
        for (int i = 0; i < na; ++i) {
            tap_diag("lens[%d] = %lld", i, (long long)a[i]);
        }
    }
    free(a);
    free(b);
    free(c);
    /* Uniform draws: each of 10 lengths about 1/10 of the documents. */
    {
        int64_t *lens = NULL;
        int      n = 0, counts[11] = {0}, worst = 0;
        nsp_workload_sample(wl, 7, 0, 5500000, 1000, &lens, &n);
        for (int i = 0; i < n; ++i) {
            counts[lens[i]]++;
            total += lens[i];
        }
        for (int v = 1; v <= 10; ++v) {
            int dev = abs(counts[v] - n / 10);
            worst = dev > worst ? dev : worst;
        }
        tap_ok(worst < n / 50, "uniform: every length within 2%% of n/10 over %d draws "
               "(worst %d)", n, worst);
        tap_is_int(total, 5500000, "large budget lands exactly");
        free(lens);
    }
    nsp_workload_free(wl);
}

static void test_shipped(void)
{
    nsp_workload_t *wl = NULL;
    const char     *path = rp_srcdir_path("data/workloads/wikipedia-flexsp.txt");
    int64_t        *lens = NULL;
    int             n = 0, over = 0;

    if (!tap_ok(nsp_workload_load(path, &wl) == NSP_OK, "load %s", path)) {
        tap_diag("%s", nsp_last_error());
        return;
    }
    tap_is_int((int64_t)nsp_workload_count(wl), 1000000, "1,000,000 Wikipedia lengths");
    tap_is_int(nsp_workload_sample(wl, 1, 0, 64 * 32768, 393216, &lens, &n), NSP_OK,
               "a 64 x 32768-token batch");
    for (int i = 0; i < n; ++i) {
        over += lens[i] > 393216 || lens[i] <= 0;
    }
    tap_ok(sum(lens, n) == 64 * 32768 && over == 0,
           "lands on the budget with %d sequences, none above max_len", n);
    tap_ok(n > 1000 && n < 4000, "about budget/mean sequences (mean length ~1014): %d", n);
    free(lens);
    nsp_workload_free(wl);
}

int main(void)
{
    test_load();
    test_bad_lines();
    test_cutting();
    test_reproducible();
    test_shipped();
    return tap_done();
}
