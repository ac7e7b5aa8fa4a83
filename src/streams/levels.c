/* Level queues: per-level step queues polled in ascending level order. */
#include "streams/levels.h"
#include "common/log.h"

#include <stdlib.h>

typedef struct levels_step {
    nsp_step_fn_t fn;
    void         *arg;
    const char   *name;
} levels_step_t;

typedef struct levels_queue {
    levels_step_t *steps;   /* [max_steps] */
    int            nsteps;  /* pushed */
    int            head;    /* next step to run; == nsteps: complete */
    nsp_status_t   status;  /* NSP_INPROGRESS, NSP_OK, or the failing step's error */
} levels_queue_t;

struct nsp_levels {
    nsp_levels_mode_t mode;
    int               nlevels;
    int               max_steps;
    int               started;
    levels_queue_t   *queues;  /* [nlevels] */
    levels_step_t    *pool;    /* [nlevels * max_steps] */
};

nsp_status_t nsp_levels_create(int nlevels, int max_steps, nsp_levels_mode_t mode,
                               nsp_levels_t **levels_p)
{
    nsp_levels_t *lv;

    if (nlevels < 1 || max_steps < 1 || levels_p == NULL ||
        (mode != NSP_LEVELS_PIPELINED && mode != NSP_LEVELS_SERIAL)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "level queues: invalid nlevels=%d, "
                         "max_steps=%d or mode=%d", nlevels, max_steps, (int)mode);
    }
    lv = calloc(1, sizeof(*lv));
    if (lv == NULL) {
        goto err_no_memory;
    }
    lv->queues = calloc((size_t)nlevels, sizeof(*lv->queues));
    lv->pool   = calloc((size_t)nlevels * (size_t)max_steps, sizeof(*lv->pool));
    if (lv->queues == NULL || lv->pool == NULL) {
        goto err_free_levels;
    }
    lv->mode      = mode;
    lv->nlevels   = nlevels;
    lv->max_steps = max_steps;
    for (int l = 0; l < nlevels; ++l) {
        lv->queues[l].steps  = lv->pool + (size_t)l * (size_t)max_steps;
        lv->queues[l].status = NSP_OK; /* empty queue: complete */
    }
    *levels_p = lv;
    return NSP_OK;

err_free_levels:
    nsp_levels_free(lv);
err_no_memory:
    return nsp_error(NSP_ERR_NO_MEMORY, "level queues: cannot allocate %d levels of %d steps",
                     nlevels, max_steps);
}

void nsp_levels_reset(nsp_levels_t *lv)
{
    if (lv == NULL) {
        return;
    }
    lv->started = 0;
    for (int l = 0; l < lv->nlevels; ++l) {
        lv->queues[l].nsteps = 0;
        lv->queues[l].head   = 0;
        lv->queues[l].status = NSP_OK;
    }
}

void nsp_levels_free(nsp_levels_t *lv)
{
    if (lv == NULL) {
        return;
    }
    free(lv->pool);
    free(lv->queues);
    free(lv);
}

nsp_status_t nsp_levels_push(nsp_levels_t *lv, int level, nsp_step_fn_t fn, void *arg,
                             const char *name)
{
    levels_queue_t *q;

    if (lv == NULL || fn == NULL || level < 0 || level >= lv->nlevels) {
        return nsp_error(NSP_ERR_INVALID_ARG, "level queues: cannot push to level %d of %d",
                         level, lv ? lv->nlevels : 0);
    }
    q = &lv->queues[level];
    if (lv->started || q->nsteps == lv->max_steps) {
        return nsp_error(NSP_ERR_INVALID_ARG, "level queues: level %d is %s (%d steps)", level,
                         lv->started ? "already started" : "full", q->nsteps);
    }
    q->steps[q->nsteps++] = (levels_step_t){.fn = fn, .arg = arg, .name = name};
    q->status             = NSP_INPROGRESS;
    return NSP_OK;
}

/* Run the queue's steps while they complete; return how many did. */
static int queue_run(levels_queue_t *q)
{
    int done = 0;

    while (q->status == NSP_INPROGRESS) {
        levels_step_t *s  = &q->steps[q->head];
        nsp_status_t   st = s->fn(s->arg);
        if (st == NSP_INPROGRESS) {
            break;
        }
        if (st < 0) {
            q->status = st;
            break;
        }
        ++done;
        if (++q->head == q->nsteps) {
            q->status = NSP_OK;
        }
    }
    return done;
}

nsp_status_t nsp_levels_progress(nsp_levels_t *lv, int *advanced)
{
    int done = 0;

    if (lv == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "level queues: NULL");
    }
    lv->started = 1;
    for (int l = 0; l < lv->nlevels; ++l) {
        levels_queue_t *q = &lv->queues[l];
        done += queue_run(q);
        if (lv->mode == NSP_LEVELS_SERIAL && q->status == NSP_INPROGRESS) {
            break; /* the next level starts when this one is complete */
        }
    }
    if (advanced != NULL) {
        *advanced = done;
    }
    return NSP_OK;
}

nsp_status_t nsp_levels_status(const nsp_levels_t *lv, int level)
{
    if (lv == NULL || level < 0 || level >= lv->nlevels) {
        return nsp_error(NSP_ERR_INVALID_ARG, "level queues: no level %d (have %d)", level,
                         lv ? lv->nlevels : 0);
    }
    return lv->queues[level].status;
}

const char *nsp_levels_pending_step(const nsp_levels_t *lv, int level)
{
    const levels_queue_t *q;

    if (lv == NULL || level < 0 || level >= lv->nlevels) {
        return "?";
    }
    q = &lv->queues[level];
    return q->head < q->nsteps ? q->steps[q->head].name : "done";
}

int nsp_levels_count(const nsp_levels_t *lv)
{
    return lv ? lv->nlevels : 0;
}
