/*
 * Level queues (src/streams): steps run in order per level, levels are
 * polled in ascending order, complete separately, fail separately, and
 * serial mode starts a level only when the one below is complete.
 */
#include "streams/levels.h"
#include "../tap.h"

#include <string.h>

/* A step that needs `polls` polls to finish (or fails with `fail`) and
 * appends its id to a shared trace when it completes. */
typedef struct fake_step {
    int          id, polls, fail;
    char        *trace;
} fake_step_t;

static nsp_status_t fake_run(void *arg)
{
    fake_step_t *s = arg;
    size_t       n;

    if (s->fail) {
        return NSP_ERR_PEER_FAILED;
    }
    if (--s->polls > 0) {
        return NSP_INPROGRESS;
    }
    n = strlen(s->trace);
    s->trace[n]     = (char)('a' + s->id);
    s->trace[n + 1] = '\0';
    return NSP_OK;
}

static void test_pipelined(void)
{
    char          trace[64] = "";
    /* level 0: one instant step; level 1: two steps of 3 and 1 polls;
     * level 2: one step of 2 polls. */
    fake_step_t   s[4] = {{0, 1, 0, trace}, {1, 3, 0, trace}, {2, 1, 0, trace},
                          {3, 2, 0, trace}};
    nsp_levels_t *lv;
    int           adv = -1;

    if (!tap_ok(nsp_levels_create(3, 2, NSP_LEVELS_PIPELINED, &lv) == NSP_OK, "create 3 levels")) {
        return;
    }
    nsp_levels_push(lv, 0, fake_run, &s[0], "instant");
    nsp_levels_push(lv, 1, fake_run, &s[1], "exchange");
    nsp_levels_push(lv, 1, fake_run, &s[2], "unpack");
    nsp_levels_push(lv, 2, fake_run, &s[3], "exchange");
    tap_is_int(nsp_levels_status(lv, 1), NSP_INPROGRESS, "a level with steps is in progress");
    tap_is_str(nsp_levels_pending_step(lv, 1), "exchange", "its pending step is named");
    nsp_levels_progress(lv, &adv);
    tap_is_int(adv, 1, "first poll: level 0 completes");
    tap_is_int(nsp_levels_status(lv, 0), NSP_OK, "level 0 complete before the others");
    tap_is_int(nsp_levels_status(lv, 2), NSP_INPROGRESS, "level 2 in flight");
    nsp_levels_progress(lv, &adv);
    tap_is_int(nsp_levels_status(lv, 2), NSP_OK, "level 2 completes while level 1 is still "
               "in flight (levels complete separately)");
    tap_is_int(nsp_levels_status(lv, 1), NSP_INPROGRESS, "level 1 still in progress");
    nsp_levels_progress(lv, &adv);
    tap_is_int(adv, 2, "third poll: both steps of level 1 run back to back");
    tap_is_str(trace, "adbc", "completion order: level 0, level 2, then level 1's two steps");
    tap_is_int(nsp_levels_push(lv, 0, fake_run, &s[0], "late"), NSP_ERR_INVALID_ARG,
               "no push after the start");
    nsp_levels_free(lv);
}

static void test_serial_and_failure(void)
{
    char          trace[64] = "";
    fake_step_t   s[3] = {{0, 2, 0, trace}, {1, 1, 1, trace}, {2, 1, 0, trace}};
    nsp_levels_t *lv;

    if (nsp_levels_create(3, 1, NSP_LEVELS_SERIAL, &lv) != NSP_OK) {
        tap_ok(0, "create serial");
        return;
    }
    nsp_levels_push(lv, 0, fake_run, &s[0], "slow");
    nsp_levels_push(lv, 1, fake_run, &s[1], "fails");
    nsp_levels_push(lv, 2, fake_run, &s[2], "after");
    nsp_levels_progress(lv, NULL);
    tap_ok(nsp_levels_status(lv, 0) == NSP_INPROGRESS && s[2].polls == 1,
           "serial: level 2 does not start while level 0 is in flight");
    nsp_levels_progress(lv, NULL);
    tap_is_int(nsp_levels_status(lv, 1), NSP_ERR_PEER_FAILED, "a failing step fails its level");
    tap_is_int(nsp_levels_status(lv, 2), NSP_OK, "the other levels go on");
    tap_is_str(trace, "ac", "serial order");
    tap_is_int(nsp_levels_push(lv, 9, fake_run, &s[0], "x"), NSP_ERR_INVALID_ARG,
               "push to a level out of range");
    nsp_levels_free(lv);
    tap_is_int(nsp_levels_create(0, 1, NSP_LEVELS_SERIAL, &lv), NSP_ERR_INVALID_ARG,
               "zero levels rejected");
}

int main(void)
{
    test_pipelined();
    test_serial_and_failure();
    return tap_done();
}
