/*
 * Streams per level on the CUDA device operations (level_streams.h over
 * devops_cuda.c): each level completes on its own. Level 2 is held back
 * behind a host callback on a producer stream; level 1 must complete
 * while level 2 is still in flight, then level 2 once released. Needs a
 * GPU: prints "1..0 # SKIP no CUDA device (...)" without.
 */
#include "streams/cuda_util.h"
#include "streams/devops.h"
#include "streams/level_streams.h"
#include "streams/levels.h"
#include "transport/request.h"

#include "../tap.h"

#include <cuda_runtime.h>
#include <sched.h>

static volatile int release_flag;

/* Runs on CUDA's callback thread: hold the producer stream until released
 * (at most 20 s, so a broken test cannot hang). */
static void CUDART_CB hold(void *arg)
{
    double t0 = nsp_now_s();

    (void)arg;
    while (!release_flag && nsp_now_s() - t0 < 20.0) {
        sched_yield();
    }
}

/* Poll until status is not INPROGRESS or `seconds` passed. */
static nsp_status_t poll_level(nsp_dev_streams_t *s, int level, double seconds)
{
    double       t0 = nsp_now_s();
    nsp_status_t st;

    while ((st = nsp_dev_streams_query(s, level)) == NSP_INPROGRESS &&
           nsp_now_s() - t0 < seconds) {
        sched_yield();
    }
    return st;
}

int main(void)
{
    nsp_dev_streams_t     *s = NULL;
    cudaStream_t            producer = NULL, consumer = NULL;
    void                   *buf = NULL;
    int                     ndev = 0;
    nsp_levels_t           *queues = NULL;
    nsp_dev_streams_wait_t waits[3];

    if (nsp_cuda_device_probe(&ndev) != NSP_OK) {
        tap_skip_all("no CUDA device (%s)", nsp_last_error());
    }
    tap_is_int(nsp_dev_streams_create(&nsp_devops_cuda, NULL, 0, 0, &s), NSP_ERR_INVALID_ARG,
               "0 levels refused");
    tap_is_int(nsp_dev_streams_create(&nsp_devops_cuda, NULL, 3, 1, &s), NSP_OK,
               "3 level streams (prioritized)");
    if (s == NULL) {
        return tap_done();
    }
    tap_is_int(nsp_dev_streams_count(s), 3, "3 levels");
    tap_ok(nsp_dev_streams_get(s, 0) != NULL && nsp_dev_streams_get(s, 2) != NULL &&
               nsp_dev_streams_get(s, 0) != nsp_dev_streams_get(s, 1),
           "one distinct stream per level");
    tap_ok(nsp_dev_streams_get(s, 3) == NULL, "no stream past the last level");
    tap_is_int(nsp_dev_streams_query(s, 1), NSP_OK, "nothing recorded yet: complete");
    tap_is_int(nsp_dev_streams_fork(s, 5, NULL), NSP_ERR_INVALID_ARG, "level 5 refused");

    cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking);
    cudaMalloc(&buf, 3 << 20);
    release_flag = 0;
    tap_is_int(nsp_devops_cuda.launch_host(producer, hold, NULL), NSP_OK,
               "a host callback holds the producer stream (devops launch_host)");
    /* Levels 0 and 1 start now; level 2 waits for the held producer. */
    for (int l = 0; l < 3; ++l) {
        if (l == 2) {
            nsp_dev_streams_fork(s, l, producer);
        }
        cudaMemsetAsync((char *)buf + ((size_t)l << 20), l + 1, 1 << 20,
                        (cudaStream_t)nsp_dev_streams_get(s, l));
        tap_is_int(nsp_dev_streams_record(s, l), NSP_OK, "level %d recorded", l);
    }
    tap_is_int(poll_level(s, 1, 10.0), NSP_OK, "level 1 completes on its own");
    tap_is_int(nsp_dev_streams_query(s, 2), NSP_INPROGRESS,
               "while level 2 is still held behind its producer");
    nsp_levels_create(3, 1, NSP_LEVELS_PIPELINED, &queues);
    for (int l = 0; l < 3; ++l) {
        waits[l] = (nsp_dev_streams_wait_t){s, l};
        nsp_levels_push(queues, l, nsp_dev_streams_step, &waits[l], "wait for the level");
    }
    nsp_levels_progress(queues, NULL);
    tap_is_int(nsp_levels_status(queues, 0), NSP_OK, "as a levels.h step: level 0 done");
    tap_is_int(nsp_levels_status(queues, 2), NSP_INPROGRESS, "level 2 still in progress");
    nsp_dev_streams_join(s, 2, consumer);
    release_flag = 1;
    tap_is_int(poll_level(s, 2, 20.0), NSP_OK, "level 2 completes once released");
    nsp_levels_progress(queues, NULL);
    tap_is_int(nsp_levels_status(queues, 2), NSP_OK, "and its step is done");
    tap_ok(cudaStreamSynchronize(consumer) == cudaSuccess, "a stream joined to level 2 runs");
    {
        unsigned char v[3];
        for (int l = 0; l < 3; ++l) {
            cudaMemcpy(&v[l], (char *)buf + ((size_t)l << 20) + 12345, 1, cudaMemcpyDeviceToHost);
        }
        tap_ok(v[0] == 1 && v[1] == 2 && v[2] == 3, "every level's work landed (%d %d %d)", v[0],
               v[1], v[2]);
    }
    nsp_levels_free(queues);
    cudaFree(buf);
    cudaStreamDestroy(producer);
    cudaStreamDestroy(consumer);
    nsp_dev_streams_free(s);
    return tap_done();
}
