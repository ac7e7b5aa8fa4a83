/*
 * The UCX progress thread (see ucx_progress.h). While requests are in flight
 * it polls again at once when a poll moved something, else after a nap that
 * doubles from POLL_NS to POLL_MAX_NS; with none in flight it polls every
 * IDLE_NS (what the rank still owes its peers after a collective goes out
 * then): on a host with more ranks than cores it must not take the cores
 * the ranks compute on (measured: with a fixed 20 us nap, 94-99% of its
 * polls found nothing, at about 9 us of CPU each).
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

#define POLL_NS (20 * 1000)        /* in flight, just moved: 20 us */
#define POLL_MAX_NS (320 * 1000)   /* in flight, nothing moved for a while: up to 320 us */
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
    nsp_ucx_progress_stats_t st; /* thread_*: the thread's; rank_*: under lock or atomic */
};

static double thread_cpu_s(void)
{
    struct timespec t;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

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

    long poll_ns = POLL_NS; /* doubles per empty poll up to POLL_MAX_NS */
    while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
        struct timespec nap = {0, IDLE_NS};
        if (__atomic_load_n(&p->busy, __ATOMIC_ACQUIRE) == 0) {
            /* Nothing in flight, but the rank may owe peers on other hosts
             * protocol replies or the tail of a tcp send, and it may now be
             * in another library (gloo) for a long time: one progress call
             * per nap sends them. */
            poll_ns = POLL_NS;
            if (pthread_mutex_trylock(&p->lock) == 0) {
                (void)ucp_worker_progress(p->worker);
                pthread_mutex_unlock(&p->lock);
            }
        } else {
            nap.tv_nsec = poll_ns;
            poll_ns     = poll_ns * 2 > POLL_MAX_NS ? POLL_MAX_NS : poll_ns * 2;
            unsigned n = 0;
            if (now_ns() - __atomic_load_n(&p->touched_ns, __ATOMIC_ACQUIRE) > HANDOFF_NS &&
                pthread_mutex_trylock(&p->lock) == 0) {
                n = ucp_worker_progress(p->worker);
                pthread_mutex_unlock(&p->lock);
                ++p->st.thread_polls;
            }
            if (n != 0) {
                ++p->st.thread_moved;
                poll_ns = POLL_NS;
                continue;
            }
        }
        nanosleep(&nap, NULL);
    }
    p->st.thread_cpu_s = thread_cpu_s();
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
        ++p->st.rank_polls; /* under the lock: one writer at a time */
        p->st.rank_moved += n != 0;
        pthread_mutex_unlock(&p->lock);
    } else {
        __atomic_add_fetch(&p->st.rank_skipped, 1, __ATOMIC_RELAXED);
    }
    return n;
}

void nsp_ucx_progress_stop(nsp_ucx_progress_t *p, nsp_ucx_progress_stats_t *stats)
{
    if (p == NULL) {
        return;
    }
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
    pthread_join(p->thread, NULL);
    if (stats != NULL) {
        *stats = p->st;
    }
    pthread_mutex_destroy(&p->lock);
    free(p);
}
