/*
 * Internal logging and error helpers shared by every layer.
 *
 * Errors are decided once: the function that finds the problem calls
 * nsp_error() (which records the message for nsp_last_error() and logs it at
 * ERROR level) and returns the status; callers propagate the status with
 * NSP_CHECK_GOTO without logging again.
 */
#ifndef NSP_COMMON_LOG_H_
#define NSP_COMMON_LOG_H_

#include "nspcomm.h"

#include <stdarg.h>

#define NSP_PRINTF_(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))

/** Is `level` enabled by NSPCOMM_LOG_LEVEL / nsp_log_set_level()? */
int nsp_log_enabled(nsp_log_level_t level);

/** Print one log line "[nspcomm host:pid LEVEL file:line] msg" if enabled. */
void nsp_log_(nsp_log_level_t level, const char *file, int line,
              const char *fmt, ...) NSP_PRINTF_(4, 5);

/**
 * Record an error decided here: store the message for nsp_last_error(), log
 * it at ERROR level, and return `status` so callers can write
 * `return nsp_error(...)` or `status = nsp_error(...); goto undo_x;`.
 */
nsp_status_t nsp_error_(nsp_status_t status, const char *file, int line,
                        const char *fmt, ...) NSP_PRINTF_(4, 5);

/** Record an error quietly (message kept, logged only at DEBUG): for errors a
 *  caller is expected to handle itself, e.g. probing a file or a fallback. */
nsp_status_t nsp_error_quiet_(nsp_status_t status, const char *file, int line,
                              const char *fmt, ...) NSP_PRINTF_(4, 5);

/** Forget the last error of this thread (on success paths that retried). */
void nsp_error_clear(void);

#define nsp_error(status, ...)       nsp_error_((status), __FILE__, __LINE__, __VA_ARGS__)
#define nsp_error_quiet(status, ...) nsp_error_quiet_((status), __FILE__, __LINE__, __VA_ARGS__)

#define NSP_LOG(level, ...)                                        \
    do {                                                           \
        if (nsp_log_enabled(level)) {                              \
            nsp_log_((level), __FILE__, __LINE__, __VA_ARGS__);    \
        }                                                          \
    } while (0)
#define NSP_WARN(...)  NSP_LOG(NSP_LOG_WARN, __VA_ARGS__)
#define NSP_INFO(...)  NSP_LOG(NSP_LOG_INFO, __VA_ARGS__)
#define NSP_DEBUG(...) NSP_LOG(NSP_LOG_DEBUG, __VA_ARGS__)
#define NSP_TRACE(...) NSP_LOG(NSP_LOG_TRACE, __VA_ARGS__)

/** Evaluate `expr` (an nsp_status_t call); on error store it in `status`
 *  and jump to `label`. The callee already logged. */
#define NSP_CHECK_GOTO(expr, status, label)  \
    do {                                     \
        (status) = (expr);                   \
        if ((status) < 0) {                  \
            goto label;                      \
        }                                    \
    } while (0)

/** Same, returning the error directly. */
#define NSP_CHECK(expr)                      \
    do {                                     \
        nsp_status_t nsp_check_st_ = (expr); \
        if (nsp_check_st_ < 0) {             \
            return nsp_check_st_;            \
        }                                    \
    } while (0)

#endif /* NSP_COMMON_LOG_H_ */
