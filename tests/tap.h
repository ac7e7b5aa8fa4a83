/*
 * A tiny TAP producer for nspcomm tests (run by automake's tap-driver.sh).
 *
 * Every check prints "ok N - name" or "not ok N - name"; tap_done() prints
 * the plan at the end (unless tap_plan() gave it first) and returns the exit
 * status. Diagnostics go to stdout prefixed by '#', as TAP wants.
 * Not thread-safe: call from the test's main thread only.
 */
#ifndef NSP_TESTS_TAP_H_
#define NSP_TESTS_TAP_H_

#include <stdint.h>

#define TAP_PRINTF_(a, b) __attribute__((format(printf, a, b)))

/** Announce the number of checks up front (optional). */
void tap_plan(int count);

/** Skip the whole test file with a reason ("1..0 # SKIP reason") and exit 0. */
void tap_skip_all(const char *fmt, ...) TAP_PRINTF_(1, 2) __attribute__((noreturn));

/** One check. Returns `cond` so a caller can add diagnostics on failure. */
int tap_ok(int cond, const char *fmt, ...) TAP_PRINTF_(2, 3);

/** Integer equality with both values shown on failure. */
int tap_is_int(int64_t got, int64_t want, const char *fmt, ...) TAP_PRINTF_(3, 4);

/** |got - want| <= abs_tol + rel_tol * |want|, both values shown on failure. */
int tap_is_double(double got, double want, double rel_tol, double abs_tol,
                  const char *fmt, ...) TAP_PRINTF_(5, 6);

/** String equality (NULL-safe). */
int tap_is_str(const char *got, const char *want, const char *fmt, ...) TAP_PRINTF_(3, 4);

/** "ok N # SKIP reason" for checks that cannot run here (counted, visible). */
void tap_skip(int count, const char *fmt, ...) TAP_PRINTF_(2, 3);

/** A diagnostic line "# ...". */
void tap_diag(const char *fmt, ...) TAP_PRINTF_(1, 2);

/** Number of failed checks so far. */
int tap_failures(void);

/** Print the plan if not yet given; return 0 if all checks passed, else 1.
 *  Use as `return tap_done();` from main. */
int tap_done(void);

#endif /* NSP_TESTS_TAP_H_ */
