/*
 * Leveled logging (NSPCOMM_LOG_LEVEL, NSPCOMM_LOG_FILE) and the per-thread
 * last-error message.
 */
#include "common/log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

#define NSP_LAST_ERROR_MAX 1024

static pthread_once_t  log_once       = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock       = PTHREAD_MUTEX_INITIALIZER;
static int             log_level      = NSP_LOG_WARN;
static FILE           *log_stream     = NULL;
static char            log_host[64]   = "?";

static __thread char   last_error[NSP_LAST_ERROR_MAX];

static const char *const level_names[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

static int parse_level(const char *text, int fallback)
{
    if (strcasecmp(text, "NONE") == 0) {
        return NSP_LOG_NONE;
    }
    for (int i = 0; i <= NSP_LOG_TRACE; ++i) {
        if (strcasecmp(text, level_names[i]) == 0) {
            return i;
        }
    }
    if (strcasecmp(text, "WARNING") == 0) {
        return NSP_LOG_WARN;
    }
    if (text[0] >= '0' && text[0] <= '4' && text[1] == '\0') {
        return text[0] - '0';
    }
    fprintf(stderr, "[nspcomm] NSPCOMM_LOG_LEVEL=%s is not one of NONE, ERROR, WARN, "
                    "INFO, DEBUG, TRACE; using WARN\n", text);
    return fallback;
}

/* Expand %h (host) and %p (pid) in a NSPCOMM_LOG_FILE path. */
static void expand_path(const char *pattern, char *out, size_t outlen)
{
    size_t n = 0;
    for (const char *p = pattern; *p != '\0' && n + 1 < outlen; ++p) {
        if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
            int w = (p[1] == 'h') ? snprintf(out + n, outlen - n, "%s", log_host)
                                  : snprintf(out + n, outlen - n, "%d", (int)getpid());
            n += (w > 0) ? (size_t)w : 0;
            ++p;
        } else {
            out[n++] = *p;
        }
    }
    out[n < outlen ? n : outlen - 1] = '\0';
}

static void log_init(void)
{
    const char *level = getenv("NSPCOMM_LOG_LEVEL");
    const char *file  = getenv("NSPCOMM_LOG_FILE");
    char        path[512];

    gethostname(log_host, sizeof(log_host) - 1);
    if (level != NULL && level[0] != '\0') {
        __atomic_store_n(&log_level, parse_level(level, NSP_LOG_WARN), __ATOMIC_RELAXED);
    }
    log_stream = stderr;
    if (file == NULL || file[0] == '\0' || strcmp(file, "stderr") == 0) {
        return;
    }
    if (strcmp(file, "stdout") == 0) {
        log_stream = stdout;
        return;
    }
    expand_path(file, path, sizeof(path));
    log_stream = fopen(path, "a");
    if (log_stream == NULL) {
        log_stream = stderr;
        fprintf(stderr, "[nspcomm] cannot open NSPCOMM_LOG_FILE=%s; logging to stderr\n", path);
    } else {
        setvbuf(log_stream, NULL, _IOLBF, 0);
    }
}

int nsp_log_enabled(nsp_log_level_t level)
{
    pthread_once(&log_once, log_init);
    return (int)level <= __atomic_load_n(&log_level, __ATOMIC_RELAXED);
}

nsp_status_t nsp_log_set_level(nsp_log_level_t level)
{
    if ((int)level < NSP_LOG_NONE || (int)level > NSP_LOG_TRACE) {
        return nsp_error(NSP_ERR_INVALID_ARG, "log level %d is not in [%d, %d]",
                         (int)level, NSP_LOG_NONE, NSP_LOG_TRACE);
    }
    pthread_once(&log_once, log_init);
    __atomic_store_n(&log_level, (int)level, __ATOMIC_RELAXED);
    return NSP_OK;
}

static void log_vprint(nsp_log_level_t level, const char *file, int line,
                       const char *fmt, va_list ap)
{
    const char *base = strrchr(file, '/');

    pthread_mutex_lock(&log_lock);
    fprintf(log_stream, "[nspcomm %s:%d %s %s:%d] ", log_host, (int)getpid(),
            level_names[level], base ? base + 1 : file, line);
    vfprintf(log_stream, fmt, ap);
    fputc('\n', log_stream);
    fflush(log_stream);
    pthread_mutex_unlock(&log_lock);
}

void nsp_log_(nsp_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    log_vprint(level, file, line, fmt, ap);
    va_end(ap);
}

static void set_last_error(const char *fmt, va_list ap)
{
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
}

nsp_status_t nsp_error_(nsp_status_t status, const char *file, int line,
                        const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    set_last_error(fmt, ap);
    va_end(ap);
    if (nsp_log_enabled(NSP_LOG_ERROR)) {
        nsp_log_(NSP_LOG_ERROR, file, line, "%s (%s)", last_error,
                 nsp_status_string(status));
    }
    return status;
}

nsp_status_t nsp_error_quiet_(nsp_status_t status, const char *file, int line,
                              const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    set_last_error(fmt, ap);
    va_end(ap);
    if (nsp_log_enabled(NSP_LOG_DEBUG)) {
        nsp_log_(NSP_LOG_DEBUG, file, line, "%s (%s)", last_error,
                 nsp_status_string(status));
    }
    return status;
}

void nsp_error_clear(void)
{
    last_error[0] = '\0';
}

const char *nsp_last_error(void)
{
    return last_error;
}
