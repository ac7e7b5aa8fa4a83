/*
 * perf/common: statistics, tables and JSON for the perf/ tools (see
 * common.h; the launching part is perf/launch.c, which needs the library).
 */
#include "common.h"

#include "common/log.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PERF_STATS_MAX 4096

/* ---- statistics ---------------------------------------------------------- */

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;

    return (a > b) - (a < b);
}

double perf_median(double *v, int n)
{
    if (n < 1) {
        return 0.0;
    }
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void perf_stats_of(const double *v, int n, perf_stats_t *out)
{
    double sorted[PERF_STATS_MAX], sum = 0;

    memset(out, 0, sizeof(*out));
    n = n < PERF_STATS_MAX ? n : PERF_STATS_MAX;
    if (n < 1) {
        return;
    }
    memcpy(sorted, v, sizeof(double) * (size_t)n);
    for (int i = 0; i < n; ++i) {
        sum += v[i];
    }
    out->n      = n;
    out->median = perf_median(sorted, n);
    out->min    = sorted[0];
    out->max    = sorted[n - 1];
    out->mean   = sum / n;
}

double perf_finite_or(double v, double fallback)
{
    return isfinite(v) ? v : fallback;
}

/* ---- tables -------------------------------------------------------------- */

const char *perf_format_num(char *buf, size_t len, double v, int prec)
{
    if (!isfinite(v)) {
        snprintf(buf, len, "N/A");
    } else if (prec < 0) {
        snprintf(buf, len, "%.0f", v);
    } else {
        snprintf(buf, len, "%.*f", prec, v);
    }
    return buf;
}

static void cell_out(FILE *out, const perf_col_t *c, const char *text)
{
    fprintf(out, c->left ? " %-*s" : " %*s", c->width, text);
}

void perf_table_header(FILE *out, const perf_col_t *cols, int ncols)
{
    int units = 0;

    fputc('#', out);
    for (int k = 0; k < ncols; ++k) {
        cell_out(out, &cols[k], cols[k].title);
        units |= cols[k].unit != NULL && cols[k].unit[0] != '\0';
    }
    fputc('\n', out);
    if (!units) {
        return;
    }
    fputc('#', out);
    for (int k = 0; k < ncols; ++k) {
        cell_out(out, &cols[k], cols[k].unit != NULL ? cols[k].unit : "");
    }
    fputc('\n', out);
}

void perf_table_row(FILE *out, const perf_col_t *cols, int ncols, const perf_cell_t *cells)
{
    char num[64];

    fputc(' ', out);
    for (int k = 0; k < ncols; ++k) {
        const char *t = cells[k].text;
        cell_out(out, &cols[k], t != NULL ? t : perf_format_num(num, sizeof(num), cells[k].num,
                                                                cols[k].prec));
    }
    fputc('\n', out);
}

/* ---- JSON ---------------------------------------------------------------- */

nsp_status_t perf_json_open(perf_json_t *j, const char *path)
{
    memset(j, 0, sizeof(*j));
    j->f = fopen(path, "w");
    if (j->f == NULL) {
        return nsp_error(NSP_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    }
    nsp_json_writer_init(&j->w, j->f, 2);
    nsp_json_begin_object(&j->w, NULL, 0);
    return NSP_OK;
}

nsp_status_t perf_json_close(perf_json_t *j)
{
    nsp_status_t status;

    if (j->f == NULL) {
        return NSP_OK;
    }
    nsp_json_end(&j->w);
    status = nsp_json_writer_finish(&j->w);
    fputc('\n', j->f);
    if (fclose(j->f) != 0 && status == NSP_OK) {
        status = nsp_error(NSP_ERR_IO, "cannot write a perf JSON file: %s", strerror(errno));
    }
    j->f = NULL;
    return status;
}

void perf_json_num(nsp_json_writer_t *w, const char *key, double v)
{
    if (isfinite(v)) {
        nsp_json_double(w, key, v);
    } else {
        nsp_json_null(w, key);
    }
}

void perf_json_num_or(nsp_json_writer_t *w, const char *key, double v, double fallback)
{
    perf_json_num(w, key, perf_finite_or(v, fallback));
}
