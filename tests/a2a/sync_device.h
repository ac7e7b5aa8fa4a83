/*
 * A device for tests of the device engine on a CPU (nested_a2a_device.c):
 * device operations (src/streams/devops.h) over host memory whose work
 * runs at once on the calling thread, as a device whose queues never lag.
 * Streams, events and pools are small checked objects (a stale or foreign
 * pointer aborts the test), and every call is counted, so a test can see
 * what a start creates, allocates and records. With the host pack ops
 * (pack_ops.h: the CUDA kernels' unit maps on the CPU) it runs the device
 * engine's index path and its orchestration over UCX, as a GPU would on
 * NCCL, minus the asynchrony.
 *
 * One process, one thread (the counters are the process's).
 */
#ifndef NSP_TESTS_A2A_SYNC_DEVICE_H_
#define NSP_TESTS_A2A_SYNC_DEVICE_H_

#include "attn_sp/memtype.h"

#include <stdint.h>

typedef struct sync_device_counts {
    uint64_t streams_created, events_created, pools_created;
    uint64_t tables_created; /* pack level_create calls (sync_device_memtype's pack ops) */
    uint64_t records, waits, copies, allocs, frees, launches, kernels;
    int64_t  streams_live, events_live, allocs_live, tables_live;
} sync_device_counts_t;

/** What was called so far. */
void sync_device_counts(sync_device_counts_t *out);

/** The device the next device_current() reports (default 0). */
void sync_device_set_current(int device);

/** The test device's operations. */
extern const nsp_devops_t sync_devops;

/** A memory type for host memory over UCX driven by the device engine: the
 *  test device, the host pack ops (counted), the host reductions. */
const nsp_memtype_t *sync_device_memtype(void);

#endif /* NSP_TESTS_A2A_SYNC_DEVICE_H_ */
