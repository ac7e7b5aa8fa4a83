/*
 * perf/common: the frame every perf/ tool shares (nccl-tests keeps its
 * harness in common.cu and one small file per collective; so do we):
 *
 *  - statistics over repetitions (min / median / max / mean);
 *  - the launcher question every multi-rank tool asks: started by a launcher
 *    (mpirun, srun, torchrun, NSPCOMM_*), or fork --ranks N local ranks on
 *    the one fork launcher (tools/nsp_launch.h), with the launcher's report;
 *  - tables: columns with a name, a unit line and a width, numbers printed
 *    with a column's precision, a non-finite number as "N/A";
 *  - JSON: the library's writer (src/common/json.h: strings escaped, doubles
 *    that read back bit for bit) with a number call that never writes inf
 *    or nan (JSON cannot hold them): a non-finite value becomes null, or the
 *    caller's fallback; so a perf file always parses.
 *
 * Built as perf/libnspperf.la (noinst), linked by perf/ and examples/.
 * Nothing here keeps state outside the structs the caller passes.
 */
#ifndef NSP_PERF_COMMON_H_
#define NSP_PERF_COMMON_H_

#include "common/json.h"
#include "nspcomm.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- statistics ---------------------------------------------------------- */

/** Statistics of n samples (seconds, or any unit: the caller's). */
typedef struct perf_stats {
    int    n;
    double min, median, max, mean;
} perf_stats_t;

/** Median of v[n] (n >= 1), sorting v in place; 0 for n < 1. */
double perf_median(double *v, int n);

/** min / median / max / mean of v[n] (v is not changed; n up to 4096).
 *  n < 1 gives all zeros. */
void perf_stats_of(const double *v, int n, perf_stats_t *out);

/** v when it is finite, else `fallback` (for JSON keys that mean "n/a"). */
double perf_finite_or(double v, double fallback);

/* ---- launching ----------------------------------------------------------- */

/**
 * The world size of the launcher that started this process (mpirun, srun,
 * torchrun, NSPCOMM_*: nsp_launcher_detect), or -1 when none did. A size
 * variable that is not a rank count, or `forked_ranks` > 0 under a launcher
 * of more than one rank (every process would fork a world of its own), is
 * refused with a message naming `prog`: *size is then untouched and
 * NSP_ERR_INVALID_ARG returned (a tool exits 2).
 */
nsp_status_t perf_launcher_size(const char *prog, int forked_ranks, int *size);

/** What perf_fork_ranks runs in each forked rank (nsp_launch_fn_t). */
typedef int (*perf_rank_fn_t)(int rank, int nranks, void *arg);

/** How a tool forks its local ranks (the fields of nsp_launch_t it sets). */
typedef struct perf_fork {
    const char    *prog;       /**< for messages */
    int            nranks;
    double         timeout_s;  /**< 0: the launcher's default */
    perf_rank_fn_t fn;
    void          *arg;        /**< borrowed, given to fn in every rank */
    void          *uid;        /**< NULL, or where the launcher makes a unique id */
    size_t         uid_bytes;
    int            rank0_only; /**< only rank 0's stdout is kept */
} perf_fork_t;

/**
 * Fork f->nranks ranks on the shared launcher (tools/nsp_launch.h): a rank
 * that fails gives the others their timeout, then they are stopped; every
 * rank is reaped and the shared-memory segments they left removed. Prints
 * to stderr what went wrong, rank by rank. Returns the exit code of the
 * rank that failed first, 1 for a launch failure or a timeout, else 0.
 */
int perf_fork_ranks(const perf_fork_t *f);

/* ---- tables -------------------------------------------------------------- */

/** A column: title, unit (the header's second line, "" for none), width,
 *  digits after the point of a number (-1: a whole number), and whether the
 *  text is left-aligned (names) or right-aligned (numbers). */
typedef struct perf_col {
    const char *title;
    const char *unit;
    int         width;
    int         prec;
    int         left;
} perf_col_t;

/** A cell: text when `text` is not NULL, else the number `num`. */
typedef struct perf_cell {
    const char *text;
    double      num;
} perf_cell_t;

#define PERF_TEXT(s) ((perf_cell_t){.text = (s), .num = 0})
#define PERF_NUM(x)  ((perf_cell_t){.text = NULL, .num = (double)(x)})

/** "#" and the titles, then "#" and the units when any column has one. */
void perf_table_header(FILE *out, const perf_col_t *cols, int ncols);

/** Two spaces and the cells, each at its column's width and precision; a
 *  non-finite number prints as "N/A". */
void perf_table_row(FILE *out, const perf_col_t *cols, int ncols, const perf_cell_t *cells);

/** The text of one number at `prec` digits (-1: whole) into buf[len]:
 *  "N/A" when it is not finite. Returns buf. */
const char *perf_format_num(char *buf, size_t len, double v, int prec);

/* ---- JSON ---------------------------------------------------------------- */

/** A perf JSON file: the writer and its stream. */
typedef struct perf_json {
    FILE             *f;
    nsp_json_writer_t w;
} perf_json_t;

/** Open `path` and begin its top object. Errors: NSP_ERR_IO (names path). */
nsp_status_t perf_json_open(perf_json_t *j, const char *path);

/** Close the top object, end the file with a newline and close it.
 *  Errors: as nsp_json_writer_finish, NSP_ERR_IO. j->f is NULL after. */
nsp_status_t perf_json_close(perf_json_t *j);

/** A number that always parses: finite as it is, non-finite as null. */
void perf_json_num(nsp_json_writer_t *w, const char *key, double v);

/** A number, non-finite as `fallback` (the tool's "n/a" value, e.g. -1). */
void perf_json_num_or(nsp_json_writer_t *w, const char *key, double v, double fallback);

#endif /* NSP_PERF_COMMON_H_ */
