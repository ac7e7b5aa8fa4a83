/*
 * The checked option parser of nspcomm's tools (perf/, tools/demo/): every
 * number a tool reads from its command line goes through one of these, so
 * every tool refuses a bad value the same way, before it runs.
 *
 * Each function reads the text `text` given to option `opt` of program
 * `prog`. On success it writes *out and returns NSP_OK. Otherwise it prints
 * one line on stderr that names the program, the option, the text and what
 * is allowed:
 *     nsp_a2a_perf: --ranks 0: expected an integer in 1..256
 * records the same message as the last error (nsp_last_error()) and returns
 * NSP_ERR_INVALID_ARG without touching *out. A tool then exits with
 * NSP_OPT_EXIT_USAGE (2), the exit status of a usage error.
 *
 * Numbers: integers are decimal, optionally in exponent form when the value
 * is whole ("2e9" is 2000000000; "1.5" is not an integer). Sizes are
 * integers or decimals with an optional binary suffix K, M, G or T
 * (x 1024^k), optionally followed by "B" or "iB", and must come to a whole
 * number of bytes. Doubles must be finite. Leading or trailing blanks and
 * empty text are errors.
 *
 * Not part of libnspcomm: a convenience library (tools/libnsptools.la) linked
 * into the tools and tests only.
 */
#ifndef NSP_TOOLS_OPT_H_
#define NSP_TOOLS_OPT_H_

#include "nspcomm.h"

#include <stddef.h>
#include <stdint.h>

/** Exit status of a tool given a bad option value. */
#define NSP_OPT_EXIT_USAGE 2

/** nsp_opt_double flag: the lower bound itself is not allowed (value > lo). */
#define NSP_OPT_LO_OPEN 1u

/** An int in [lo, hi] (lo, hi within int's range). */
nsp_status_t nsp_opt_int(const char *prog, const char *opt, const char *text, int lo, int hi,
                         int *out);

/** A 64-bit signed integer in [lo, hi]. */
nsp_status_t nsp_opt_i64(const char *prog, const char *opt, const char *text, int64_t lo,
                         int64_t hi, int64_t *out);

/** A 64-bit unsigned integer in [lo, hi] (no sign accepted). */
nsp_status_t nsp_opt_u64(const char *prog, const char *opt, const char *text, uint64_t lo,
                         uint64_t hi, uint64_t *out);

/** A finite double in [lo, hi] ((lo, hi] with NSP_OPT_LO_OPEN in flags). */
nsp_status_t nsp_opt_double(const char *prog, const char *opt, const char *text, double lo,
                            double hi, unsigned flags, double *out);

/** A byte count in [lo, hi], with an optional K/M/G/T suffix (binary). */
nsp_status_t nsp_opt_size(const char *prog, const char *opt, const char *text, size_t lo,
                          size_t hi, size_t *out);

/** One of names[0..n-1] (exact match): *out is its index. */
nsp_status_t nsp_opt_choice(const char *prog, const char *opt, const char *text,
                            const char *const *names, int n, int *out);

/**
 * A comma-separated list of names from names[0..n-1] (n <= 32), at least
 * one, each at most once: *mask gets bit k for names[k].
 */
nsp_status_t nsp_opt_list(const char *prog, const char *opt, const char *text,
                          const char *const *names, int n, uint32_t *mask);

/**
 * A path the tool will write (a JSON or SVG file): the file can be opened
 * for writing if it exists, or its directory exists and is writable if it
 * does not. Checked now, so a bad path fails before the run, not after it.
 * Creates nothing.
 */
nsp_status_t nsp_opt_out_path(const char *prog, const char *opt, const char *path);

/** A path the tool will read: an existing readable regular file. */
nsp_status_t nsp_opt_in_path(const char *prog, const char *opt, const char *path);

/**
 * The up-front memory check of a request: `bytes` (an estimate, as a double
 * so that absurd requests do not overflow) must be at most the limit, which
 * is the machine's physical memory, or NSPCOMM_TOOL_MEM_LIMIT bytes (with a
 * size suffix) when that is set. `what` says what the request is, e.g.
 * "--tokens-per-rank 1e12 x 64 ranks". On failure prints
 *     nsp_sim: --tokens-per-rank 1e12 x 64 ranks needs about 7.3 TiB, more
 *     than the limit of 23.4 GiB (physical memory)
 * and returns NSP_ERR_NO_MEMORY; nothing is allocated.
 */
nsp_status_t nsp_opt_mem_check(const char *prog, const char *what, double bytes);

/**
 * The up-front estimate of a planning request, before any batch is drawn:
 * a batch of `tokens` tokens (or exactly `seqs` sequences when seqs > 0)
 * from workload `wl` cut at max_len, planned by `nplanners` planners on
 * `ranks` ranks. The sequences per batch (pieces per token measured on a
 * 2^20-token sample of wl) must stay within NSP_MAX_BATCH_SEQS, and the
 * memory (8 B of lengths plus about 64 B of plan per sequence and planner,
 * 4 KiB per rank and planner) within nsp_opt_mem_check's limit. `what`
 * names the request in the message ("--tokens-per-rank 1e12 x 64 ranks").
 * NSP_OK, or NSP_ERR_INVALID_ARG / NSP_ERR_NO_MEMORY after printing why.
 */
nsp_status_t nsp_opt_batch_check(const char *prog, const char *what, const nsp_workload_t *wl,
                                 uint64_t seed, int64_t max_len, double tokens, int64_t seqs,
                                 int ranks, int nplanners);

/** Bytes in words ("7.3 TiB") into buf[len]; returns buf. */
const char *nsp_opt_bytes_str(double bytes, char *buf, size_t len);

#endif /* NSP_TOOLS_OPT_H_ */
