/*
 * What UCX chose to reach each peer: the transport report of a UCX world.
 */
#ifndef NSP_TRANSPORT_UCX_REPORT_H_
#define NSP_TRANSPORT_UCX_REPORT_H_

#include <stddef.h>
#include <ucp/api/ucp.h>

/**
 * The distinct "transport/device" names of ep's lanes (from
 * ucp_ep_print_info), space-separated, into buf[len], e.g. "sysv/memory
 * cma/memory" or "tcp/eth0"; "?" when UCX printed none. Always NUL-terminates.
 */
void nsp_ucx_ep_lanes(ucp_ep_h ep, char *buf, size_t len);

/**
 * The sizes at which a tag send on ep changes protocol, as UCX prints them
 * ("0..<egr/short>..8185..<egr/bcopy>..8192..<rndv>..(inf)"), into buf[len];
 * "?" when UCX printed none. Always NUL-terminates.
 */
void nsp_ucx_ep_tag_protocols(ucp_ep_h ep, char *buf, size_t len);

/** The first size that goes rendezvous in such a map (SIZE_MAX: none). */
size_t nsp_ucx_rndv_thresh_of(const char *map);

/**
 * Log at INFO, one line for this rank `me` of `nranks`: per peer, the lanes
 * UCX uses to reach it (eps[r], NULL for me) and whether the peer is on this
 * host (same_host[r]). Nothing when INFO is not enabled.
 */
void nsp_ucx_report(int me, int nranks, ucp_ep_h const *eps, const int *same_host);

#endif /* NSP_TRANSPORT_UCX_REPORT_H_ */
