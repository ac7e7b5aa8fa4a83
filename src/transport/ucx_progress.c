/*
 * The UCX progress thread (see ucx_progress.h). Polls every POLL_NS while
 * requests are in flight and nothing moved, every IDLE_NS when none are
 * (what the rank still owes its peers after a collective goes out then): on
 * a host with more ranks than cores it must not take the cores the ranks
 * compute on.
 */
#include "transport/ucx_progress.h"

#include "common/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define POLL_NS (20 * 1000)        /* in flight, nothing moved: 20 us */
#define IDLE_NS (1000 * 1000)      /* nothing in flight: 1 ms */
#define HANDOFF_NS (200 * 1000)    /* the rank progressed itself this recently: stay away */
#define PROGRESS_NICE (-10)        /* the thread's nice value (the rank's stays) */

struct nsp_ucx_progress {
    ucp_worker_h worker;
    pthread_t    thread;
    int          stop;   /* atomic: 1 asks the thread to end */
    int          busy;   /* atomic: requests in flight */
    int64_t      touched_ns; /* atomic: when the rank last progressed itself */
    pthread_mutex_t lock;    /* held around every progress call of either thread */
    uint64_t     events; /* the thread's progress calls that moved something */
};

static int64_t now_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/*
 * Progress only while requests are in flight and the rank is away (in its
 * kernel): when it waits, it progresses itself, and two threads taking the
 * worker's lock in turn on oversubscribed cores spin for nothing.
 */
static void *progress_main(void *arg)
{
    nsp_ucx_progress_t *p = arg;

    /* Run before the computing threads when woken (it sleeps almost all the
     * time): with more ranks than cores it would otherwise wait a whole
     * time slice to move the next bytes. Needs CAP_SYS_NICE; else ignored. */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), PROGRESS_NICE) != 0) {
        NSP_DEBUG("ucx: progress thread keeps its priority (%s)", strerror(errno));
    }

    while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
        struct timespec nap = {0, IDLE_NS};
        if (__atomic_load_n(&p->busy, __ATOMIC_ACQUIRE) == 0) {
            /* Nothing in flight, but the rank may owe peers on other hosts
             * protocol replies or the tail of a tcp send, and it may now be
             * in another library (gloo) for a long time: one progress call
             * per nap sends them. */
            if (pthread_mutex_trylock(&p->lock) == 0) {
                (void)ucp_worker_progress(p->worker);
                pthread_mutex_unlock(&p->lock);
            }
        } else {
            nap.tv_nsec = POLL_NS;
            unsigned n = 0;
            if (now_ns() - __atomic_load_n(&p->touched_ns, __ATOMIC_ACQUIRE) > HANDOFF_NS &&
                pthread_mutex_trylock(&p->lock) == 0) {
                n = ucp_worker_progress(p->worker);
                pthread_mutex_unlock(&p->lock);
            }
            if (n != 0) {
                ++p->events;
                continue;
            }
        }
        nanosleep(&nap, NULL);
    }
    return NULL;
}

nsp_status_t nsp_ucx_progress_start(ucp_worker_h worker, nsp_ucx_progress_t **out)
{
    nsp_ucx_progress_t *p = calloc(1, sizeof(*p));
    int                 rc;

    if (p == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "ucx: no memory for the progress thread");
    }
    p->worker = worker;
    pthread_mutex_init(&p->lock, NULL);
    rc = pthread_create(&p->thread, NULL, progress_main, p);
    if (rc != 0) {
        pthread_mutex_destroy(&p->lock);
        free(p);
        return nsp_error(NSP_ERR_BACKEND, "ucx: cannot start the progress thread: %s",
                         strerror(rc));
    }
    *out = p;
    return NSP_OK;
}

void nsp_ucx_progress_busy(nsp_ucx_progress_t *p, int delta)
{
    if (p != NULL) {
        __atomic_add_fetch(&p->busy, delta, __ATOMIC_ACQ_REL);
    }
}

unsigned nsp_ucx_progress_rank(nsp_ucx_progress_t *p, ucp_worker_h worker)
{
    unsigned n = 0;

    if (p == NULL) {
        return ucp_worker_progress(worker);
    }
    __atomic_store_n(&p->touched_ns, now_ns(), __ATOMIC_RELEASE);
    if (pthread_mutex_trylock(&p->lock) == 0) {
        n = ucp_worker_progress(worker);
        pthread_mutex_unlock(&p->lock);
    }
    return n;
}

void nsp_ucx_progress_stop(nsp_ucx_progress_t *p, uint64_t *events)
{
    if (p == NULL) {
        return;
    }
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
    pthread_join(p->thread, NULL);
    if (events != NULL) {
        *events = p->events;
    }
    pthread_mutex_destroy(&p->lock);
    free(p);
}
