/* Status strings, last-error messages and log level parsing. */
#include "nspcomm.h"
#include "common/log.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_status_strings(void)
{
#define CHECK_NAME_(name, code, desc) \
    tap_ok(strncmp(nsp_status_string(name), #name ": ", strlen(#name) + 2) == 0, \
           "status string of %s starts with its name", #name);
    NSP_STATUS_MAP(CHECK_NAME_)
#undef CHECK_NAME_
    tap_ok(strstr(nsp_status_string((nsp_status_t)-999), "UNKNOWN") != NULL,
           "unknown status code gives an UNKNOWN string");
    tap_is_int(NSP_OK, 0, "NSP_OK is 0");
    tap_ok(NSP_INPROGRESS > 0, "NSP_INPROGRESS is positive");
}

static void test_last_error(void)
{
    nsp_status_t st;

    nsp_error_clear();
    tap_is_str(nsp_last_error(), "", "no last error after clear");
    st = nsp_error_quiet(NSP_ERR_PARSE, "file %s line %d: bad", "x.txt", 7);
    tap_is_int(st, NSP_ERR_PARSE, "nsp_error returns its status");
    tap_is_str(nsp_last_error(), "file x.txt line 7: bad", "last error keeps the message");
    tap_is_int(nsp_log_set_level((nsp_log_level_t)9), NSP_ERR_INVALID_ARG,
               "an out-of-range log level is rejected");
    tap_ok(strstr(nsp_last_error(), "log level 9") != NULL, "and the message names it");
}

static void test_log_file(const char *self)
{
    char  path[] = "/tmp/nsp_test_log_XXXXXX";
    int   fd     = mkstemp(path);
    char  line[512] = "";
    FILE *f;

    /* The environment is read once, on first use; this test only checks the
     * file sink through a fresh process (re-exec) to keep it independent. */
    if (fd < 0) {
        tap_ok(0, "mkstemp for the log file");
        return;
    }
    close(fd);
    {
        char cmd[2048];
        snprintf(cmd, sizeof(cmd),
                 "NSPCOMM_LOG_LEVEL=INFO NSPCOMM_LOG_FILE=%s %s --log-child", path, self);
        tap_is_int(system(cmd), 0, "child process logging to NSPCOMM_LOG_FILE exits 0");
    }
    f = fopen(path, "r");
    if (f != NULL) {
        if (fgets(line, sizeof(line), f) == NULL) {
            line[0] = '\0';
        }
        fclose(f);
    }
    tap_ok(strstr(line, "INFO") != NULL && strstr(line, "hello from the child") != NULL,
           "an INFO line reaches NSPCOMM_LOG_FILE");
    unlink(path);
}

/* The child of test_log_none: errors, warnings and decisions of the library
 * at NSPCOMM_LOG_LEVEL=NONE, then at a level set to NONE at run time. */
static int quiet_child(void)
{
    nsp_model_t model;

    NSP_WARN("this WARN line must not appear at NONE");
    nsp_error(NSP_ERR_INTERNAL, "this ERROR line must not appear at NONE");
    if (nsp_model_preset("no-such-model", &model) != NSP_ERR_NOT_FOUND ||
        strstr(nsp_last_error(), "no-such-model") == NULL) {
        return 2; /* the error is still decided and kept, only not printed */
    }
    if (nsp_log_set_level(NSP_LOG_WARN) != NSP_OK || !nsp_log_enabled(NSP_LOG_WARN) ||
        nsp_log_set_level(NSP_LOG_NONE) != NSP_OK || nsp_log_enabled(NSP_LOG_ERROR)) {
        return 3;
    }
    nsp_error(NSP_ERR_INTERNAL, "this ERROR line must not appear after set_level(NONE)");
    return 0;
}

/* NSPCOMM_LOG_LEVEL=NONE silences the library: nothing on stdout or stderr. */
static void test_log_none(const char *self)
{
    char  path[] = "/tmp/nsp_test_none_XXXXXX";
    int   fd     = mkstemp(path);
    char  cmd[2048];
    long  size   = -1;
    FILE *f;

    if (fd < 0) {
        tap_ok(0, "mkstemp for the captured output");
        return;
    }
    close(fd);
    snprintf(cmd, sizeof(cmd), "NSPCOMM_LOG_LEVEL=none %s --quiet-child >%s 2>&1", self, path);
    tap_is_int(system(cmd), 0, "child at NSPCOMM_LOG_LEVEL=NONE keeps its errors and exits 0");
    f = fopen(path, "r");
    if (f != NULL) {
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        fclose(f);
    }
    tap_is_int((int)size, 0, "NSPCOMM_LOG_LEVEL=NONE: the library printed nothing");
    unlink(path);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--quiet-child") == 0) {
        return quiet_child();
    }
    if (argc > 1 && strcmp(argv[1], "--log-child") == 0) {
        NSP_INFO("hello from the child %d", 42);
        NSP_DEBUG("this DEBUG line must not appear at INFO");
        return 0;
    }
    test_status_strings();
    test_last_error();
    test_log_file(argv[0]);
    test_log_none(argv[0]);
    return tap_done();
}
