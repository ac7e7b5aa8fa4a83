/*
 * perf/common: the JSON every perf tool writes always parses (inf, -inf and
 * nan become null or the caller's fallback, strings are escaped), the
 * table prints N/A for a number that is not finite, and the statistics
 * over repetitions are min / median / max / mean. One process, no ranks.
 */
#include "common.h"

#include "common/json.h"
#include "tap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The whole of file `path` (caller frees), or NULL. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "r");
    char *buf;

    if (f == NULL) {
        return NULL;
    }
    buf  = calloc(1, 1 << 16);
    *len = buf != NULL ? fread(buf, 1, (1 << 16) - 1, f) : 0;
    fclose(f);
    return buf;
}

static void test_json(void)
{
    char              path[] = "/tmp/nsp-perf-json-XXXXXX";
    int               fd = mkstemp(path);
    perf_json_t       j;
    nsp_json_t       *root = NULL;
    const nsp_json_t *v;
    size_t            len = 0;
    char             *text;
    const char       *s = NULL;
    double            d = 0;

    tap_ok(fd >= 0, "a temporary file");
    close(fd);
    tap_is_int(perf_json_open(&j, path), NSP_OK, "perf_json_open");
    perf_json_num(&j.w, "inf", INFINITY);
    perf_json_num(&j.w, "ninf", -INFINITY);
    perf_json_num(&j.w, "nan", NAN);
    perf_json_num(&j.w, "finite", 0.1);
    perf_json_num_or(&j.w, "fallback", NAN, -1.0);
    nsp_json_string(&j.w, "text", "a \"quoted\" \\ back\nslash\t\x01");
    tap_is_int(perf_json_close(&j), NSP_OK, "perf_json_close: the writer saw no error");
    text = slurp(path, &len);
    tap_ok(text != NULL && strstr(text, ": inf") == NULL && strstr(text, ": -inf") == NULL &&
               strstr(text, ": nan") == NULL && strstr(text, "Infinity") == NULL &&
               strstr(text, "NaN") == NULL,
           "no inf, nan, Infinity or NaN as a value");
    tap_is_int(nsp_json_parse(text != NULL ? text : "", len, path, &root), NSP_OK,
               "the file parses");
    v = nsp_json_get(root, "inf");
    tap_ok(v != NULL && v->type == NSP_JSON_NULL, "inf is written as null");
    v = nsp_json_get(root, "ninf");
    tap_ok(v != NULL && v->type == NSP_JSON_NULL, "-inf is written as null");
    v = nsp_json_get(root, "nan");
    tap_ok(v != NULL && v->type == NSP_JSON_NULL, "nan is written as null");
    nsp_json_as_double(nsp_json_get(root, "finite"), "finite", &d);
    tap_ok(d == 0.1, "a finite number reads back bit for bit (%.17g)", d);
    nsp_json_as_double(nsp_json_get(root, "fallback"), "fallback", &d);
    tap_is_double(d, -1.0, 0, 0, "nan with a fallback is the fallback");
    nsp_json_as_string(nsp_json_get(root, "text"), "text", &s);
    tap_is_str(s, "a \"quoted\" \\ back\nslash\t\x01", "quotes, backslash and control "
               "characters round-trip");
    tap_ok(text != NULL && strstr(text, "\\u0001") != NULL && strstr(text, "\\\"quoted\\\"") != NULL,
           "they are escaped in the file");
    nsp_json_free(root);
    free(text);
    unlink(path);
    tap_ok(perf_json_open(&j, "/nonexistent-dir/x.json") == NSP_ERR_IO && j.f == NULL,
           "a path that cannot be written is NSP_ERR_IO");
}

static void test_table(void)
{
    static const perf_col_t cols[] = {{"name", "", 6, 0, 1}, {"time", "(us)", 8, 2, 0},
                                      {"n", "", 4, -1, 0}};
    perf_cell_t             row[] = {PERF_TEXT("ab"), PERF_NUM(NAN), PERF_NUM(7)};
    char                    buf[256], num[32];
    FILE                   *f = fmemopen(buf, sizeof(buf), "w");

    perf_table_header(f, cols, 3);
    perf_table_row(f, cols, 3, row);
    row[1] = PERF_NUM(1.005e3);
    perf_table_row(f, cols, 3, row);
    fclose(f);
    tap_is_str(buf, "# name       time    n\n#            (us)     \n  ab          N/A    7\n"
               "  ab      1005.00    7\n", "header with units, N/A for nan, precisions");
    tap_is_str(perf_format_num(num, sizeof(num), INFINITY, 3), "N/A", "inf formats as N/A");
    tap_is_str(perf_format_num(num, sizeof(num), 2.5, -1), "2", "a whole-number column");
}

static void test_stats(void)
{
    double       v[] = {5, 1, 4, 2, 3}, even[] = {4, 1, 3, 2};
    perf_stats_t st;

    perf_stats_of(v, 5, &st);
    tap_ok(st.n == 5 && st.min == 1 && st.median == 3 && st.max == 5 && st.mean == 3,
           "min/median/max/mean of 5 samples");
    tap_ok(v[0] == 5 && v[4] == 3, "perf_stats_of leaves its input as it was");
    tap_is_double(perf_median(even, 4), 2.5, 0, 0, "median of an even count");
    perf_stats_of(v, 0, &st);
    tap_ok(st.n == 0 && st.median == 0, "no samples: zeros");
    tap_is_double(perf_finite_or(-INFINITY, -1), -1, 0, 0, "perf_finite_or");
}

int main(void)
{
    tap_plan(21);
    test_json();
    test_table();
    test_stats();
    return tap_done();
}
