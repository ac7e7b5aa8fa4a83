/*
 * Internal helpers for the planner's files: model/cluster objects and plans
 * in JSON (docs/design.md §8), shared by the loaders, the plan reader/writer and the
 * simulator (which embeds plans in its own JSON).
 */
#ifndef NSP_PLANNER_PLANNER_IO_H_
#define NSP_PLANNER_PLANNER_IO_H_

#include "nspcomm.h"
#include "common/json.h"

/**
 * Fill *model from a JSON object with the keys of the plan format's "model"
 * object (docs/design.md §8). "base" names a preset the other keys override; without
 * it every key but "name" is required. `default_name` is used when "name" is
 * absent (NULL: "name" is required too). Keys starting with '_' and "about",
 * "source", "sources", "comment" are ignored; any other key is an error.
 * Errors: NSP_ERR_PARSE (wrong type, unknown or missing key: source, line,
 * key), NSP_ERR_INVALID_ARG (a value out of range: source, line, key, range),
 * NSP_ERR_NOT_FOUND (unknown base preset).
 */
nsp_status_t nsp_model_from_json(const nsp_json_t *obj, const char *default_name,
                                 nsp_model_t *model);

/** The same for a "cluster" object. Without "ranks" (possible only with a
 *  "base"), the cluster is one node: ranks = ranks_per_node. */
nsp_status_t nsp_cluster_from_json(const nsp_json_t *obj, const char *default_name,
                                   nsp_cluster_t *cluster);

/** Write a model / cluster as an inline object member `key` (NULL in arrays). */
void nsp_model_write_json(nsp_json_writer_t *w, const char *key, const nsp_model_t *model);
/* The cluster's keys into the object being written (for files that add
 * their own notes beside them: perf/nsp_calibrate, the demo). */
void nsp_cluster_write_fields(nsp_json_writer_t *w, const nsp_cluster_t *c);
void nsp_cluster_write_json(nsp_json_writer_t *w, const char *key,
                            const nsp_cluster_t *cluster);

/**
 * Write a plan as one "nspcomm-plan-v1" object into an open writer, as
 * member `key` of the current object (NULL at the top or in an array), so a
 * plan can be embedded at any depth. Errors are sticky in the writer.
 */
void nsp_plan_write_json_to(const nsp_plan_t *plan, nsp_json_writer_t *w, const char *key);

/**
 * Build a plan from a parsed "nspcomm-plan-v1" object (e.g. one plan of an
 * nspcomm-sim-v1 file). Errors as nsp_plan_read_json().
 */
nsp_status_t nsp_plan_from_json(const nsp_json_t *obj, nsp_plan_t **plan);

#endif /* NSP_PLANNER_PLANNER_IO_H_ */
