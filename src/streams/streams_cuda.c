/* CUDA streams per level: one stream, a fork and a done event per level. */
#include "streams/streams_cuda.h"

#include "common/log.h"
#include "streams/cuda_util.h"

#include <cuda_runtime.h>
#include <stdlib.h>

#define STREAMS_WHAT "cuda level streams"

typedef struct streams_level {
    cudaStream_t stream;
    cudaEvent_t  fork;     /* recorded on a producer, waited for by stream */
    cudaEvent_t  done;     /* recorded on stream */
    int          recorded; /* done was recorded at least once */
} streams_level_t;

struct nsp_cuda_streams {
    int              nlevels;
    int              device;
    streams_level_t *levels;
};

static void streams_release(nsp_cuda_streams_t *s, int upto)
{
    for (int l = 0; l < upto; ++l) {
        streams_level_t *L = &s->levels[l];
        if (L->done != NULL) {
            cudaEventDestroy(L->done);
        }
        if (L->fork != NULL) {
            cudaEventDestroy(L->fork);
        }
        if (L->stream != NULL) {
            cudaStreamDestroy(L->stream);
        }
    }
}

/* Create one level's stream and events; on error nothing of it is left. */
static nsp_status_t streams_level_init(streams_level_t *L, int priority)
{
    nsp_status_t status;

    NSP_CUDA_CHECK(cudaStreamCreateWithPriority(&L->stream, cudaStreamNonBlocking, priority),
                   STREAMS_WHAT);
    NSP_CUDA_GOTO(cudaEventCreateWithFlags(&L->fork, cudaEventDisableTiming), STREAMS_WHAT,
                  status, err_destroy_stream);
    NSP_CUDA_GOTO(cudaEventCreateWithFlags(&L->done, cudaEventDisableTiming), STREAMS_WHAT,
                  status, err_destroy_fork);
    return NSP_OK;
err_destroy_fork:
    cudaEventDestroy(L->fork);
err_destroy_stream:
    cudaStreamDestroy(L->stream);
    L->stream = NULL;
    L->fork   = NULL;
    return status;
}

nsp_status_t nsp_cuda_streams_create(int nlevels, int device, int prioritize,
                                     nsp_cuda_streams_t **out)
{
    nsp_cuda_streams_t *s;
    nsp_status_t        status;
    int                 least = 0, greatest = 0;

    if (nlevels < 1 || out == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: %d levels (need >= 1)", STREAMS_WHAT, nlevels);
    }
    NSP_CHECK(nsp_cuda_use_device(device, STREAMS_WHAT));
    s = calloc(1, sizeof(*s));
    if (s == NULL || (s->levels = calloc((size_t)nlevels, sizeof(*s->levels))) == NULL) {
        free(s);
        return nsp_error(NSP_ERR_NO_MEMORY, "%s: no memory for %d levels", STREAMS_WHAT,
                         nlevels);
    }
    s->nlevels = nlevels;
    NSP_CUDA_GOTO(cudaGetDevice(&s->device), STREAMS_WHAT, status, err_free);
    if (prioritize) {
        /* Lower numbers are higher priorities: greatest <= least. */
        NSP_CUDA_GOTO(cudaDeviceGetStreamPriorityRange(&least, &greatest), STREAMS_WHAT, status,
                      err_free);
    }
    for (int l = 0; l < nlevels; ++l) {
        int span = least - greatest;
        int prio = prioritize && span > 0 ? greatest + (l < span ? l : span) : least;
        status   = streams_level_init(&s->levels[l], prio);
        if (status != NSP_OK) {
            streams_release(s, l);
            goto err_free;
        }
    }
    NSP_DEBUG("%s: %d streams on device %d%s", STREAMS_WHAT, nlevels, s->device,
              prioritize ? " (lower levels first)" : "");
    *out = s;
    return NSP_OK;
err_free:
    free(s->levels);
    free(s);
    return status;
}

void nsp_cuda_streams_free(nsp_cuda_streams_t *s)
{
    if (s == NULL) {
        return;
    }
    streams_release(s, s->nlevels);
    free(s->levels);
    free(s);
}

int nsp_cuda_streams_count(const nsp_cuda_streams_t *s)
{
    return s != NULL ? s->nlevels : 0;
}

int nsp_cuda_streams_device(const nsp_cuda_streams_t *s)
{
    return s != NULL ? s->device : -1;
}

void *nsp_cuda_streams_get(const nsp_cuda_streams_t *s, int level)
{
    if (s == NULL || level < 0 || level >= s->nlevels) {
        return NULL;
    }
    return (void *)s->levels[level].stream;
}

static nsp_status_t streams_check(const nsp_cuda_streams_t *s, int level, const char *fn)
{
    if (s == NULL || level < 0 || level >= s->nlevels) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: level %d of %d", fn, level,
                         s != NULL ? s->nlevels : 0);
    }
    return NSP_OK;
}

nsp_status_t nsp_cuda_streams_fork(nsp_cuda_streams_t *s, int level, void *producer)
{
    streams_level_t *L;

    NSP_CHECK(streams_check(s, level, "nsp_cuda_streams_fork"));
    L = &s->levels[level];
    NSP_CUDA_CHECK(cudaEventRecord(L->fork, (cudaStream_t)producer), STREAMS_WHAT);
    NSP_CUDA_CHECK(cudaStreamWaitEvent(L->stream, L->fork, 0), STREAMS_WHAT);
    return NSP_OK;
}

nsp_status_t nsp_cuda_streams_record(nsp_cuda_streams_t *s, int level)
{
    streams_level_t *L;

    NSP_CHECK(streams_check(s, level, "nsp_cuda_streams_record"));
    L = &s->levels[level];
    NSP_CUDA_CHECK(cudaEventRecord(L->done, L->stream), STREAMS_WHAT);
    L->recorded = 1;
    return NSP_OK;
}

nsp_status_t nsp_cuda_streams_query(const nsp_cuda_streams_t *s, int level)
{
    const streams_level_t *L;
    cudaError_t            e;

    NSP_CHECK(streams_check(s, level, "nsp_cuda_streams_query"));
    L = &s->levels[level];
    if (!L->recorded) {
        return NSP_OK;
    }
    e = cudaEventQuery(L->done);
    if (e == cudaSuccess) {
        return NSP_OK;
    }
    if (e == cudaErrorNotReady) {
        return NSP_INPROGRESS;
    }
    return nsp_cuda_status(e, STREAMS_WHAT, "cudaEventQuery (a kernel of the level failed)");
}

nsp_status_t nsp_cuda_streams_join(nsp_cuda_streams_t *s, int level, void *consumer)
{
    streams_level_t *L;

    NSP_CHECK(streams_check(s, level, "nsp_cuda_streams_join"));
    L = &s->levels[level];
    if (L->recorded) {
        NSP_CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)consumer, L->done, 0), STREAMS_WHAT);
    }
    return NSP_OK;
}

nsp_status_t nsp_cuda_streams_step(void *arg)
{
    const nsp_cuda_streams_wait_t *w = arg;

    return nsp_cuda_streams_query(w->streams, w->level);
}
