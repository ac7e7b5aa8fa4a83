/* A tiny TAP producer; see tap.h. */
#include "tap.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_count;
static int tap_failed;
static int tap_planned = -1;

static void tap_line(int cond, const char *fmt, va_list ap)
{
    ++tap_count;
    printf("%sok %d - ", cond ? "" : "not ", tap_count);
    vprintf(fmt, ap);
    printf("\n");
    if (!cond) {
        ++tap_failed;
    }
    fflush(stdout);
}

void tap_plan(int count)
{
    tap_planned = count;
    printf("1..%d\n", count);
    fflush(stdout);
}

void tap_skip_all(const char *fmt, ...)
{
    va_list ap;

    printf("1..0 # SKIP ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    exit(0);
}

int tap_ok(int cond, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    tap_line(cond, fmt, ap);
    va_end(ap);
    return cond;
}

int tap_is_int(int64_t got, int64_t want, const char *fmt, ...)
{
    va_list ap;
    int     cond = (got == want);

    va_start(ap, fmt);
    tap_line(cond, fmt, ap);
    va_end(ap);
    if (!cond) {
        tap_diag("  got:  %" PRId64, got);
        tap_diag("  want: %" PRId64, want);
    }
    return cond;
}

int tap_is_double(double got, double want, double rel_tol, double abs_tol,
                  const char *fmt, ...)
{
    va_list ap;
    int     cond = isfinite(got) && fabs(got - want) <= abs_tol + rel_tol * fabs(want);

    va_start(ap, fmt);
    tap_line(cond, fmt, ap);
    va_end(ap);
    if (!cond) {
        tap_diag("  got:  %.17g", got);
        tap_diag("  want: %.17g (rel tol %g, abs tol %g)", want, rel_tol, abs_tol);
    }
    return cond;
}

int tap_is_str(const char *got, const char *want, const char *fmt, ...)
{
    va_list ap;
    int     cond = (got == NULL || want == NULL) ? (got == want) : (strcmp(got, want) == 0);

    va_start(ap, fmt);
    tap_line(cond, fmt, ap);
    va_end(ap);
    if (!cond) {
        tap_diag("  got:  \"%s\"", got ? got : "(null)");
        tap_diag("  want: \"%s\"", want ? want : "(null)");
    }
    return cond;
}

void tap_skip(int count, const char *fmt, ...)
{
    char    reason[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    for (int i = 0; i < count; ++i) {
        printf("ok %d # SKIP %s\n", ++tap_count, reason);
    }
    fflush(stdout);
}

void tap_diag(const char *fmt, ...)
{
    va_list ap;

    printf("# ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

int tap_failures(void)
{
    return tap_failed;
}

int tap_done(void)
{
    if (tap_planned < 0) {
        printf("1..%d\n", tap_count);
    } else if (tap_planned != tap_count) {
        printf("# planned %d checks but ran %d\n", tap_planned, tap_count);
        return 1;
    }
    fflush(stdout);
    return tap_failed ? 1 : 0;
}
