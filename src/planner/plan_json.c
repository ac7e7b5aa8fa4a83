/*
 * Plans as JSON: "nspcomm-plan-v1" (docs/design.md §8) plus "flags" (NSP_PLAN_FLAG_*
 * bits) and a per-group "ring" written only when it is not 1. Doubles are
 * written with %.17g, so a plan read back evaluates to the same prediction
 * bit for bit.
 */
#include "planner/planner_io.h"
#include "planner/plan_internal.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>

#define PLAN_FORMAT "nspcomm-plan-v1"

/* ------------------------------------------------------------------------ */
/* Writer                                                                   */
/* ------------------------------------------------------------------------ */

static void write_group(nsp_json_writer_t *w, const nsp_plan_group_t *grp)
{
    nsp_json_begin_object(w, NULL, 1);
    nsp_json_int(w, "rank0", grp->rank0);
    nsp_json_int(w, "size", grp->size);
    nsp_json_begin_array(w, "seqs", 1);
    for (int k = 0; k < grp->nseqs; ++k) {
        nsp_json_int(w, NULL, grp->seqs[k]);
    }
    nsp_json_end(w);
    nsp_json_bool(w, "recompute", grp->recompute);
    nsp_json_bool(w, "pipelined", grp->pipelined);
    if (grp->ring != 1) {
        nsp_json_int(w, "ring", grp->ring);
    }
    nsp_json_end(w);
}

static void write_doubles(nsp_json_writer_t *w, const char *key, const double *values, int n)
{
    nsp_json_begin_array(w, key, 1);
    for (int i = 0; i < n; ++i) {
        nsp_json_double(w, NULL, values[i]);
    }
    nsp_json_end(w);
}

void nsp_plan_write_json_to(const nsp_plan_t *plan, nsp_json_writer_t *w, const char *key)
{
    nsp_json_begin_object(w, key, 0);
    nsp_json_string(w, "format", PLAN_FORMAT);
    nsp_json_string(w, "planner", plan->planner);
    nsp_json_int(w, "flags", plan->flags);
    nsp_model_write_json(w, "model", &plan->model);
    nsp_cluster_write_json(w, "cluster", &plan->cluster);
    nsp_json_begin_array(w, "seq_lens", 1);
    for (int i = 0; i < plan->nseqs; ++i) {
        nsp_json_int(w, NULL, plan->seq_lens[i]);
    }
    nsp_json_end(w);
    nsp_json_begin_array(w, "rounds", 0);
    for (int r = 0; r < plan->nrounds; ++r) {
        nsp_json_begin_object(w, NULL, 0);
        nsp_json_begin_array(w, "groups", 0);
        for (int g = 0; g < plan->rounds[r].ngroups; ++g) {
            write_group(w, &plan->rounds[r].groups[g]);
        }
        nsp_json_end(w);
        nsp_json_end(w);
    }
    nsp_json_end(w);
    nsp_json_begin_object(w, "predicted", 0);
    nsp_json_double(w, "step_s", plan->predicted.step_s);
    write_doubles(w, "rank_s", plan->predicted.rank_s, plan->cluster.ranks);
    write_doubles(w, "rank_mem_bytes", plan->predicted.rank_mem_bytes, plan->cluster.ranks);
    nsp_json_double(w, "lower_bound_s", plan->predicted.lower_bound_s);
    nsp_json_double(w, "round_s", plan->predicted.round_s);
    nsp_json_double(w, "plan_ms", plan->predicted.plan_ms);
    nsp_json_end(w);
    nsp_json_end(w);
}

nsp_status_t nsp_plan_write_json(const nsp_plan_t *plan, FILE *out)
{
    nsp_json_writer_t w;

    if (plan == NULL || out == NULL || plan->cluster.ranks < 1 ||
        plan->predicted.rank_s == NULL || plan->predicted.rank_mem_bytes == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_plan_write_json: NULL or incomplete plan");
    }
    nsp_json_writer_init(&w, out, 2);
    nsp_plan_write_json_to(plan, &w, NULL);
    NSP_CHECK(nsp_json_writer_finish(&w));
    if (fputc('\n', out) == EOF || fflush(out) != 0) {
        return nsp_error(NSP_ERR_IO, "cannot write the plan: output stream error");
    }
    return NSP_OK;
}

/* ------------------------------------------------------------------------ */
/* Reader                                                                   */
/* ------------------------------------------------------------------------ */

static int is_comment_key(const char *key)
{
    return key[0] == '_';
}

/* Every key of obj must be one of `known` (NULL-terminated) or start with '_'. */
static nsp_status_t check_keys(const nsp_json_t *obj, const char *const *known,
                               const char *what)
{
    for (size_t i = 0; i < obj->count; ++i) {
        int ok = is_comment_key(obj->keys[i]);
        for (const char *const *k = known; *k != NULL && !ok; ++k) {
            ok = strcmp(obj->keys[i], *k) == 0;
        }
        if (!ok) {
            return nsp_error(NSP_ERR_PARSE, "%s:%d: unknown key \"%s\" in %s",
                             obj->items[i].source, obj->items[i].line, obj->keys[i], what);
        }
    }
    return NSP_OK;
}

static nsp_status_t read_seq_lens(const nsp_json_t *root, nsp_plan_t *plan)
{
    const nsp_json_t *arr = nsp_json_get(root, "seq_lens");

    for (int i = 0; i < plan->nseqs; ++i) {
        int64_t len;
        NSP_CHECK(nsp_json_as_int64(&arr->items[i], "seq_lens[]", &len));
        if (len <= 0) {
            return nsp_error(NSP_ERR_INVALID_ARG, "%s:%d: seq_lens[%d] = %lld; lengths must be "
                             "positive", arr->items[i].source, arr->items[i].line, i,
                             (long long)len);
        }
        plan->seq_lens[i] = len;
    }
    return NSP_OK;
}

static nsp_status_t read_group(const nsp_json_t *obj, int r, int g, nsp_plan_t *plan,
                               nsp_plan_group_t *grp)
{
    static const char *const keys[] = {"rank0", "size", "seqs", "recompute", "pipelined",
                                       "ring", NULL};
    const nsp_json_t *v, *seqs;
    char              what[64];

    snprintf(what, sizeof(what), "rounds[%d].groups[%d]", r, g);
    NSP_CHECK(nsp_json_expect(obj, NSP_JSON_OBJECT, what));
    NSP_CHECK(check_keys(obj, keys, what));
    NSP_CHECK(nsp_json_require(obj, "rank0", what, &v));
    NSP_CHECK(nsp_json_as_int(v, "rank0", &grp->rank0));
    NSP_CHECK(nsp_json_require(obj, "size", what, &v));
    NSP_CHECK(nsp_json_as_int(v, "size", &grp->size));
    if (grp->size < 1 || grp->rank0 < 0 || grp->rank0 > plan->cluster.ranks - grp->size) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s:%d: %s: ranks [%d, %d) are outside the "
                         "cluster's [0, %d)", obj->source, obj->line, what, grp->rank0,
                         grp->rank0 + grp->size, plan->cluster.ranks);
    }
    NSP_CHECK(nsp_json_require(obj, "recompute", what, &v));
    NSP_CHECK(nsp_json_as_bool(v, "recompute", &grp->recompute));
    NSP_CHECK(nsp_json_require(obj, "pipelined", what, &v));
    NSP_CHECK(nsp_json_as_bool(v, "pipelined", &grp->pipelined));
    grp->ring = 1;
    if ((v = nsp_json_get(obj, "ring")) != NULL) {
        NSP_CHECK(nsp_json_as_int(v, "ring", &grp->ring));
    }
    NSP_CHECK(nsp_json_require(obj, "seqs", what, &seqs));
    NSP_CHECK(nsp_json_expect(seqs, NSP_JSON_ARRAY, "seqs"));
    if (seqs->count > (size_t)plan->nseqs) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s:%d: %s holds %zu sequences, more than the "
                         "plan's %d", seqs->source, seqs->line, what, seqs->count, plan->nseqs);
    }
    grp->seqs = malloc(sizeof(int) * (seqs->count > 0 ? seqs->count : 1));
    if (grp->seqs == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate %s", what);
    }
    for (size_t k = 0; k < seqs->count; ++k) {
        int idx;
        NSP_CHECK(nsp_json_as_int(&seqs->items[k], "seqs[]", &idx));
        if (idx < 0 || idx >= plan->nseqs) {
            return nsp_error(NSP_ERR_INVALID_ARG, "%s:%d: %s.seqs[%zu] = %d is not an index "
                             "into seq_lens [0, %d)", seqs->items[k].source,
                             seqs->items[k].line, what, k, idx, plan->nseqs);
        }
        grp->seqs[grp->nseqs++] = idx;
    }
    return NSP_OK;
}

static nsp_status_t read_rounds(const nsp_json_t *arr, nsp_plan_t *plan)
{
    static const char *const keys[] = {"groups", NULL};

    NSP_CHECK(nsp_json_expect(arr, NSP_JSON_ARRAY, "rounds"));
    plan->rounds = calloc(arr->count > 0 ? arr->count : 1, sizeof(*plan->rounds));
    if (plan->rounds == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate %zu rounds", arr->count);
    }
    plan->nrounds = (int)arr->count;
    for (int r = 0; r < plan->nrounds; ++r) {
        const nsp_json_t *robj = &arr->items[r], *groups;
        nsp_plan_round_t *pr = &plan->rounds[r];
        char              what[32];

        snprintf(what, sizeof(what), "rounds[%d]", r);
        NSP_CHECK(nsp_json_expect(robj, NSP_JSON_OBJECT, what));
        NSP_CHECK(check_keys(robj, keys, what));
        NSP_CHECK(nsp_json_require(robj, "groups", what, &groups));
        NSP_CHECK(nsp_json_expect(groups, NSP_JSON_ARRAY, "groups"));
        pr->groups = calloc(groups->count > 0 ? groups->count : 1, sizeof(*pr->groups));
        if (pr->groups == NULL) {
            return nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate %zu groups", groups->count);
        }
        /* Counted before they are filled, so nsp_plan_free releases them on error. */
        pr->ngroups = (int)groups->count;
        for (int g = 0; g < pr->ngroups; ++g) {
            NSP_CHECK(read_group(&groups->items[g], r, g, plan, &pr->groups[g]));
        }
    }
    return NSP_OK;
}

/* A per-rank array: [ranks] numbers, or [] / absent (zeros). */
static nsp_status_t read_rank_array(const nsp_json_t *pred, const char *key, int ranks,
                                    double *out)
{
    const nsp_json_t *arr = nsp_json_get(pred, key);

    if (arr == NULL) {
        return NSP_OK;
    }
    NSP_CHECK(nsp_json_expect(arr, NSP_JSON_ARRAY, key));
    if (arr->count == 0) {
        return NSP_OK;
    }
    if (arr->count != (size_t)ranks) {
        return nsp_error(NSP_ERR_PARSE, "%s:%d: predicted.%s has %zu entries; the cluster has "
                         "%d ranks (give one per rank, or [])", arr->source, arr->line, key,
                         arr->count, ranks);
    }
    for (int i = 0; i < ranks; ++i) {
        NSP_CHECK(nsp_json_as_double(&arr->items[i], key, &out[i]));
    }
    return NSP_OK;
}

static nsp_status_t read_predicted(const nsp_json_t *root, nsp_plan_t *plan)
{
    static const char *const keys[] = {"step_s", "rank_s", "rank_mem_bytes", "lower_bound_s",
                                       "round_s", "plan_ms", NULL};
    static const char *const scalars[] = {"step_s", "lower_bound_s", "round_s", "plan_ms"};
    double *const            targets[] = {&plan->predicted.step_s,
                                          &plan->predicted.lower_bound_s,
                                          &plan->predicted.round_s,
                                          &plan->predicted.plan_ms};
    const nsp_json_t        *pred = nsp_json_get(root, "predicted");

    if (pred == NULL) {
        return NSP_OK;   /* a hand-written plan: nsp_plan_evaluate() fills it */
    }
    NSP_CHECK(nsp_json_expect(pred, NSP_JSON_OBJECT, "predicted"));
    NSP_CHECK(check_keys(pred, keys, "predicted"));
    for (int i = 0; i < 4; ++i) {
        const nsp_json_t *v = nsp_json_get(pred, scalars[i]);
        if (v != NULL) {
            NSP_CHECK(nsp_json_as_double(v, scalars[i], targets[i]));
        }
    }
    NSP_CHECK(read_rank_array(pred, "rank_s", plan->cluster.ranks, plan->predicted.rank_s));
    return read_rank_array(pred, "rank_mem_bytes", plan->cluster.ranks,
                           plan->predicted.rank_mem_bytes);
}

static nsp_status_t read_header(const nsp_json_t *root, const char **planner, unsigned *flags)
{
    static const char *const keys[] = {"format", "planner", "flags", "model", "cluster",
                                       "seq_lens", "rounds", "predicted", NULL};
    const nsp_json_t        *v;
    const char              *format;
    int64_t                  bits = 0;

    NSP_CHECK(nsp_json_expect(root, NSP_JSON_OBJECT, "plan"));
    NSP_CHECK(nsp_json_require(root, "format", "the plan", &v));
    NSP_CHECK(nsp_json_as_string(v, "format", &format));
    if (strcmp(format, PLAN_FORMAT) != 0) {
        return nsp_error(NSP_ERR_PARSE, "%s:%d: format \"%s\" is not \"" PLAN_FORMAT "\"",
                         v->source, v->line, format);
    }
    NSP_CHECK(check_keys(root, keys, "the plan"));
    NSP_CHECK(nsp_json_require(root, "planner", "the plan", &v));
    NSP_CHECK(nsp_json_as_string(v, "planner", planner));
    if (strlen(*planner) >= sizeof(((nsp_plan_t *)0)->planner)) {
        return nsp_error(NSP_ERR_PARSE, "%s:%d: planner name \"%.40s...\" is too long",
                         v->source, v->line, *planner);
    }
    if ((v = nsp_json_get(root, "flags")) != NULL) {
        NSP_CHECK(nsp_json_as_int64(v, "flags", &bits));
        if (bits < 0 || bits > 0xffffffffll) {
            return nsp_error(NSP_ERR_PARSE, "%s:%d: flags = %lld is not a 32-bit mask",
                             v->source, v->line, (long long)bits);
        }
    }
    *flags = (unsigned)bits;
    return NSP_OK;
}

nsp_status_t nsp_plan_from_json(const nsp_json_t *root, nsp_plan_t **plan_p)
{
    nsp_model_t       model;
    nsp_cluster_t     cluster;
    const nsp_json_t *v, *lens;
    const char       *planner;
    unsigned          flags = 0;
    nsp_plan_t       *plan = NULL;
    nsp_status_t      status;

    if (root == NULL || plan_p == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_plan_from_json: NULL argument");
    }
    NSP_CHECK(read_header(root, &planner, &flags));
    NSP_CHECK(nsp_json_require(root, "model", "the plan", &v));
    NSP_CHECK(nsp_model_from_json(v, NULL, &model));
    NSP_CHECK(nsp_json_require(root, "cluster", "the plan", &v));
    NSP_CHECK(nsp_cluster_from_json(v, NULL, &cluster));
    NSP_CHECK(nsp_json_require(root, "seq_lens", "the plan", &lens));
    NSP_CHECK(nsp_json_expect(lens, NSP_JSON_ARRAY, "seq_lens"));
    NSP_CHECK(nsp_json_require(root, "rounds", "the plan", &v));
    if (lens->count > (size_t)0x7fffffff) {
        return nsp_error(NSP_ERR_PARSE, "%s:%d: too many sequences", lens->source, lens->line);
    }
    /* Lengths are filled by read_seq_lens after allocation. */
    NSP_CHECK(nsp_plan_alloc(planner, &model, &cluster, NULL, 0, &plan));
    free(plan->seq_lens);
    plan->seq_lens = malloc(sizeof(int64_t) * (lens->count > 0 ? lens->count : 1));
    if (plan->seq_lens == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate %zu lengths", lens->count);
        goto err_free_plan;
    }
    plan->nseqs = (int)lens->count;
    plan->flags = flags;
    NSP_CHECK_GOTO(read_seq_lens(root, plan), status, err_free_plan);
    NSP_CHECK_GOTO(read_rounds(v, plan), status, err_free_plan);
    NSP_CHECK_GOTO(read_predicted(root, plan), status, err_free_plan);
    *plan_p = plan;
    return NSP_OK;

err_free_plan:
    nsp_plan_free(plan);
    return status;
}

nsp_status_t nsp_plan_read_json(const char *text, nsp_plan_t **plan)
{
    nsp_json_t  *root;
    nsp_status_t status;

    if (text == NULL || plan == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_plan_read_json: NULL argument");
    }
    NSP_CHECK(nsp_json_parse(text, strlen(text), "<plan>", &root));
    status = nsp_plan_from_json(root, plan);
    nsp_json_free(root);
    return status;
}
