/*
 * Model and cluster descriptions from JSON (nsp_model_load, nsp_cluster_load)
 * and their JSON form in plans. The keys are those of the plan format's
 * "model" and "cluster" objects (docs/design.md §8); "base" starts from a preset so
 * an infra team's file can hold only what it measured.
 */
#include "planner/planner_io.h"
#include "common/log.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

typedef enum { FIELD_INT, FIELD_DOUBLE } field_kind_t;

/* One numeric key: where it lives in the struct and its allowed range
 * [min, max], with min excluded when min_open (e.g. "> 0"). */
typedef struct field_spec {
    const char  *key;
    field_kind_t kind;
    size_t       offset;
    double       min;
    int          min_open;
    double       max;
    int          optional;   /* may be absent even without a base (keeps the default) */
} field_spec_t;

#define MODEL_FIELD(key, kind, min, open, max) {#key, kind, offsetof(nsp_model_t, key), min, open, max, 0}
#define CLUSTER_FIELD(key, kind, min, open, max) {#key, kind, offsetof(nsp_cluster_t, key), min, open, max, 0}
#define CPU_FIELD(key) {#key, FIELD_DOUBLE, offsetof(nsp_cluster_t, key), 0, 0, HUGE_VAL, 1}

static const field_spec_t model_fields[] = {
    MODEL_FIELD(layers,   FIELD_INT,    1, 0, INT_MAX),
    MODEL_FIELD(hidden,   FIELD_INT,    1, 0, INT_MAX),
    MODEL_FIELD(q_heads,  FIELD_INT,    1, 0, INT_MAX),
    MODEL_FIELD(kv_heads, FIELD_INT,    1, 0, INT_MAX),
    MODEL_FIELD(head_dim, FIELD_INT,    1, 0, INT_MAX),
    MODEL_FIELD(ffn,      FIELD_DOUBLE, 0, 1, HUGE_VAL),
    MODEL_FIELD(topk,     FIELD_INT,    0, 0, INT_MAX),
    MODEL_FIELD(experts,  FIELD_INT,    0, 0, INT_MAX),
    MODEL_FIELD(params,   FIELD_DOUBLE, 0, 1, HUGE_VAL),
};

static const field_spec_t cluster_fields[] = {
    CLUSTER_FIELD(ranks,           FIELD_INT,    1, 0, NSP_MAX_RANKS),
    CLUSTER_FIELD(ranks_per_node,  FIELD_INT,    1, 0, NSP_MAX_RANKS),
    CLUSTER_FIELD(mem_bytes,       FIELD_DOUBLE, 0, 1, HUGE_VAL),
    CLUSTER_FIELD(workspace_bytes, FIELD_DOUBLE, 0, 0, HUGE_VAL),
    CLUSTER_FIELD(gemm_flops,      FIELD_DOUBLE, 0, 1, HUGE_VAL),
    CLUSTER_FIELD(attn_flops,      FIELD_DOUBLE, 0, 1, HUGE_VAL),
    CLUSTER_FIELD(bw_intra,        FIELD_DOUBLE, 0, 1, HUGE_VAL),
    CLUSTER_FIELD(bw_inter,        FIELD_DOUBLE, 0, 1, HUGE_VAL),
    CLUSTER_FIELD(lat_intra,       FIELD_DOUBLE, 0, 0, HUGE_VAL),
    CLUSTER_FIELD(lat_inter,       FIELD_DOUBLE, 0, 0, HUGE_VAL),
    CLUSTER_FIELD(overlap,         FIELD_DOUBLE, 0, 0, 1.0),
    /* optional; negative (the default) = derived from model and cluster */
    {"round_fixed_s", FIELD_DOUBLE, offsetof(nsp_cluster_t, round_fixed_s), -1.0, 0,
     HUGE_VAL, 1},
    /* optional, default 0: the exchange CPU of a rank (docs/reference/cost-model.md section 9) */
    CPU_FIELD(cpu_byte_intra),
    CPU_FIELD(cpu_byte_inter),
    CPU_FIELD(cpu_call_intra),
    CPU_FIELD(cpu_call_inter),
};

#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_FIELDS 20

/* What one object description needs to be read generically. */
typedef struct desc_kind {
    const char         *what;     /* "model" or "cluster" */
    const field_spec_t *fields;
    size_t              nfields;
    void               *target;   /* nsp_model_t or nsp_cluster_t */
    char               *name;     /* its name[64] */
} desc_kind_t;

static int is_meta_key(const char *key)
{
    return key[0] == '_' || strcmp(key, "about") == 0 || strcmp(key, "source") == 0 ||
           strcmp(key, "sources") == 0 || strcmp(key, "comment") == 0;
}

static double field_get(const desc_kind_t *k, const field_spec_t *f)
{
    const char *at = (const char *)k->target + f->offset;

    return f->kind == FIELD_INT ? (double)*(const int *)at : *(const double *)at;
}

/* Every key must be known: a typo would otherwise silently keep a default. */
static nsp_status_t check_known_keys(const nsp_json_t *obj, const desc_kind_t *k)
{
    for (size_t i = 0; i < obj->count; ++i) {
        const char *key = obj->keys[i];
        int         known = strcmp(key, "name") == 0 || strcmp(key, "base") == 0 ||
                            is_meta_key(key);
        for (size_t f = 0; f < k->nfields && !known; ++f) {
            known = strcmp(key, k->fields[f].key) == 0;
        }
        if (!known) {
            char list[512] = "";
            for (size_t f = 0; f < k->nfields; ++f) {
                strncat(list, k->fields[f].key, sizeof(list) - strlen(list) - 3);
                strncat(list, ", ", sizeof(list) - strlen(list) - 1);
            }
            return nsp_error(NSP_ERR_PARSE, "%s:%d: unknown key \"%s\" in a %s description "
                             "(known: name, base, %s and keys starting with '_')",
                             obj->items[i].source, obj->items[i].line, key, k->what, list);
        }
    }
    return NSP_OK;
}

/* Read every numeric key present; without a base, each one is required. */
static nsp_status_t read_fields(const nsp_json_t *obj, const desc_kind_t *k, int have_base,
                                int *line_of)
{
    for (size_t f = 0; f < k->nfields; ++f) {
        const field_spec_t *spec = &k->fields[f];
        const nsp_json_t   *v = nsp_json_get(obj, spec->key);
        char               *at = (char *)k->target + spec->offset;

        if (v == NULL) {
            if (!have_base && !spec->optional) {
                return nsp_error(NSP_ERR_PARSE, "%s:%d: %s description has no key \"%s\" "
                                 "(required unless \"base\" names a preset)", obj->source,
                                 obj->line, k->what, spec->key);
            }
            continue;
        }
        if (spec->kind == FIELD_INT) {
            NSP_CHECK(nsp_json_as_int(v, spec->key, (int *)(void *)at));
        } else {
            NSP_CHECK(nsp_json_as_double(v, spec->key, (double *)(void *)at));
        }
        line_of[f] = v->line;
    }
    return NSP_OK;
}

static nsp_status_t check_ranges(const nsp_json_t *obj, const desc_kind_t *k,
                                 const int *line_of)
{
    for (size_t f = 0; f < k->nfields; ++f) {
        const field_spec_t *spec = &k->fields[f];
        double              value = field_get(k, spec);
        int                 low_ok = spec->min_open ? value > spec->min : value >= spec->min;

        if (!low_ok || !(value <= spec->max) || !isfinite(value)) {
            char range[64];
            if (spec->max < HUGE_VAL) {
                snprintf(range, sizeof(range), "in [%g, %g]", spec->min, spec->max);
            } else {
                snprintf(range, sizeof(range), "%s %g", spec->min_open ? ">" : ">=", spec->min);
            }
            return nsp_error(NSP_ERR_INVALID_ARG, "%s:%d: %s key \"%s\" must be %s, got %.17g",
                             obj->source, line_of[f] > 0 ? line_of[f] : obj->line, k->what,
                             spec->key, range, value);
        }
    }
    return NSP_OK;
}

static nsp_status_t read_name(const nsp_json_t *obj, const desc_kind_t *k,
                              const char *default_name, int have_base)
{
    const nsp_json_t *v = nsp_json_get(obj, "name");
    const char       *name = NULL;

    if (v != NULL) {
        NSP_CHECK(nsp_json_as_string(v, "name", &name));
    } else if (default_name != NULL) {
        name = default_name;
    } else if (have_base) {
        return NSP_OK;   /* keeps the preset's name */
    } else {
        return nsp_error(NSP_ERR_PARSE, "%s:%d: %s description has no key \"name\"",
                         obj->source, obj->line, k->what);
    }
    if (strlen(name) >= 64) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s:%d: %s name \"%.40s...\" is longer than 63 "
                         "bytes", obj->source, v ? v->line : obj->line, k->what, name);
    }
    snprintf(k->name, 64, "%s", name);
    return NSP_OK;
}

/* The "base" preset named in obj, or NULL if none. */
static nsp_status_t read_base(const nsp_json_t *obj, const char **base)
{
    const nsp_json_t *v = nsp_json_get(obj, "base");

    *base = NULL;
    if (v != NULL) {
        NSP_CHECK(nsp_json_as_string(v, "base", base));
    }
    return NSP_OK;
}

/* The preset error lists the known names; add the file and line to it. */
static nsp_status_t base_error(const nsp_json_t *obj, nsp_status_t status)
{
    const nsp_json_t *v = nsp_json_get(obj, "base");
    char              msg[512];

    /* A copy: the message is rewritten in the same last-error buffer. */
    snprintf(msg, sizeof(msg), "%s", nsp_last_error());
    return nsp_error_quiet(status, "%s:%d: key \"base\": %s", obj->source,
                           v ? v->line : obj->line, msg);
}

nsp_status_t nsp_model_from_json(const nsp_json_t *obj, const char *default_name,
                                 nsp_model_t *model_p)
{
    nsp_model_t model;
    desc_kind_t k = {"model", model_fields, NELEMS(model_fields), &model, model.name};
    int         line_of[MAX_FIELDS] = {0};
    const char *base;
    nsp_status_t status;

    if (obj == NULL || model_p == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_model_from_json: NULL argument");
    }
    NSP_CHECK(nsp_json_expect(obj, NSP_JSON_OBJECT, "model"));
    NSP_CHECK(check_known_keys(obj, &k));
    NSP_CHECK(read_base(obj, &base));
    memset(&model, 0, sizeof(model));
    if (base != NULL) {
        status = nsp_model_preset(base, &model);
        if (status != NSP_OK) {
            return base_error(obj, status);
        }
    }
    NSP_CHECK(read_name(obj, &k, default_name, base != NULL));
    NSP_CHECK(read_fields(obj, &k, base != NULL, line_of));
    NSP_CHECK(check_ranges(obj, &k, line_of));
    if (model.kv_heads > model.q_heads || model.q_heads % model.kv_heads != 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s:%d: model key \"q_heads\" = %d must be a "
                         "multiple of \"kv_heads\" = %d", obj->source, obj->line,
                         model.q_heads, model.kv_heads);
    }
    if (model.topk > model.experts || (model.experts > 0) != (model.topk > 0)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s:%d: model keys \"topk\" = %d and "
                         "\"experts\" = %d: a dense model has both 0, a MoE model "
                         "1 <= topk <= experts", obj->source, obj->line, model.topk,
                         model.experts);
    }
    *model_p = model;
    return NSP_OK;
}

/* A preset's values whatever its ranks per node: ask for 2^20 ranks (a
 * multiple of any power-of-two node size), then the caller sets ranks. */
static nsp_status_t cluster_base(const nsp_json_t *obj, const char *base,
                                 nsp_cluster_t *cluster)
{
    nsp_status_t status = nsp_cluster_preset(base, 1 << 20, cluster);

    if (status != NSP_OK) {
        return base_error(obj, status);
    }
    return NSP_OK;
}

nsp_status_t nsp_cluster_from_json(const nsp_json_t *obj, const char *default_name,
                                   nsp_cluster_t *cluster_p)
{
    nsp_cluster_t     cluster;
    desc_kind_t       k = {"cluster", cluster_fields, NELEMS(cluster_fields), &cluster,
                           cluster.name};
    int               line_of[MAX_FIELDS] = {0};
    const nsp_json_t *ranks_v;
    const char       *base;

    if (obj == NULL || cluster_p == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_cluster_from_json: NULL argument");
    }
    NSP_CHECK(nsp_json_expect(obj, NSP_JSON_OBJECT, "cluster"));
    NSP_CHECK(check_known_keys(obj, &k));
    NSP_CHECK(read_base(obj, &base));
    memset(&cluster, 0, sizeof(cluster));
    cluster.round_fixed_s = NSP_ROUND_FIXED_DERIVED;
    ranks_v = nsp_json_get(obj, "ranks");
    if (base != NULL) {
        /* The file's ranks need not suit the preset's node size (the file may
         * change ranks_per_node), so the preset is read at a neutral size. */
        NSP_CHECK(cluster_base(obj, base, &cluster));
        cluster.ranks = 0;
    }
    NSP_CHECK(read_name(obj, &k, default_name, base != NULL));
    NSP_CHECK(read_fields(obj, &k, base != NULL, line_of));
    if (ranks_v == NULL) {
        cluster.ranks = cluster.ranks_per_node;   /* one node */
    }
    NSP_CHECK(check_ranges(obj, &k, line_of));
    if (cluster.ranks > cluster.ranks_per_node && cluster.ranks % cluster.ranks_per_node != 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s:%d: cluster key \"ranks\" = %d is not a "
                         "multiple of \"ranks_per_node\" = %d", obj->source,
                         ranks_v ? ranks_v->line : obj->line, cluster.ranks,
                         cluster.ranks_per_node);
    }
    if (cluster.workspace_bytes >= cluster.mem_bytes) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s:%d: cluster key \"workspace_bytes\" = %.17g "
                         "leaves nothing of \"mem_bytes\" = %.17g", obj->source, obj->line,
                         cluster.workspace_bytes, cluster.mem_bytes);
    }
    *cluster_p = cluster;
    return NSP_OK;
}

/* "dir/h100-measured.json" -> "h100-measured" into out[64]. */
static void file_stem(const char *path, char *out, size_t len)
{
    const char *slash = strrchr(path, '/');
    const char *start = slash ? slash + 1 : path;
    const char *dot = strrchr(start, '.');
    size_t      n = dot && dot > start ? (size_t)(dot - start) : strlen(start);

    if (n >= len) {
        n = len - 1;
    }
    memcpy(out, start, n);
    out[n] = '\0';
}

nsp_status_t nsp_model_load(const char *path, nsp_model_t *model)
{
    nsp_json_t  *root;
    char         stem[64];
    nsp_status_t status;

    if (path == NULL || model == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_model_load: NULL argument");
    }
    NSP_CHECK(nsp_json_parse_file(path, &root));
    file_stem(path, stem, sizeof(stem));
    status = nsp_model_from_json(root, stem, model);
    nsp_json_free(root);
    return status;
}

nsp_status_t nsp_cluster_load(const char *path, nsp_cluster_t *cluster)
{
    nsp_json_t  *root;
    char         stem[64];
    nsp_status_t status;

    if (path == NULL || cluster == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_cluster_load: NULL argument");
    }
    NSP_CHECK(nsp_json_parse_file(path, &root));
    file_stem(path, stem, sizeof(stem));
    status = nsp_cluster_from_json(root, stem, cluster);
    nsp_json_free(root);
    return status;
}

void nsp_model_write_json(nsp_json_writer_t *w, const char *key, const nsp_model_t *m)
{
    nsp_json_begin_object(w, key, 1);
    nsp_json_string(w, "name", m->name);
    nsp_json_int(w, "layers", m->layers);
    nsp_json_int(w, "hidden", m->hidden);
    nsp_json_int(w, "q_heads", m->q_heads);
    nsp_json_int(w, "kv_heads", m->kv_heads);
    nsp_json_int(w, "head_dim", m->head_dim);
    nsp_json_double(w, "ffn", m->ffn);
    nsp_json_int(w, "topk", m->topk);
    nsp_json_int(w, "experts", m->experts);
    nsp_json_double(w, "params", m->params);
    nsp_json_end(w);
}

void nsp_cluster_write_json(nsp_json_writer_t *w, const char *key, const nsp_cluster_t *c)
{
    nsp_json_begin_object(w, key, 1);
    nsp_cluster_write_fields(w, c);
    nsp_json_end(w);
}

void nsp_cluster_write_fields(nsp_json_writer_t *w, const nsp_cluster_t *c)
{
    nsp_json_string(w, "name", c->name);
    nsp_json_int(w, "ranks", c->ranks);
    nsp_json_int(w, "ranks_per_node", c->ranks_per_node);
    nsp_json_double(w, "mem_bytes", c->mem_bytes);
    nsp_json_double(w, "workspace_bytes", c->workspace_bytes);
    nsp_json_double(w, "gemm_flops", c->gemm_flops);
    nsp_json_double(w, "attn_flops", c->attn_flops);
    nsp_json_double(w, "bw_intra", c->bw_intra);
    nsp_json_double(w, "bw_inter", c->bw_inter);
    nsp_json_double(w, "lat_intra", c->lat_intra);
    nsp_json_double(w, "lat_inter", c->lat_inter);
    nsp_json_double(w, "overlap", c->overlap);
    nsp_json_double(w, "round_fixed_s", c->round_fixed_s);
    /* only when set: a cluster without the exchange CPU term (every preset)
     * writes the plans and files it wrote before the keys existed */
    if (c->cpu_byte_intra != 0.0 || c->cpu_byte_inter != 0.0 || c->cpu_call_intra != 0.0 ||
        c->cpu_call_inter != 0.0) {
        nsp_json_double(w, "cpu_byte_intra", c->cpu_byte_intra);
        nsp_json_double(w, "cpu_byte_inter", c->cpu_byte_inter);
        nsp_json_double(w, "cpu_call_intra", c->cpu_call_intra);
        nsp_json_double(w, "cpu_call_inter", c->cpu_call_inter);
    }
}
