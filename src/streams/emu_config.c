/*
 * NSPCOMM_DEVICE=emu:FILE (emu_config.h): the file, its checks, the timing
 * it gives.
 */
#include "config.h"

#include "streams/emu_config.h"

#include "common/json.h"
#include "common/log.h"

#include <stdio.h>
#include <string.h>

#define CFG_WHAT "NSPCOMM_DEVICE=emu:FILE"

/* A path of FILE: relative ones to FILE's directory. */
static nsp_status_t cfg_path(const char *file, const char *path, const char *key, char *out)
{
    const char *slash = strrchr(file, '/');
    int         n;

    if (path[0] == '/' || slash == NULL) {
        n = snprintf(out, NSP_EMU_PATH_MAX, "%s", path);
    } else {
        n = snprintf(out, NSP_EMU_PATH_MAX, "%.*s/%s", (int)(slash - file), file, path);
    }
    if (n < 0 || n >= NSP_EMU_PATH_MAX) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: %s: \"%s\" is a path longer than %d bytes",
                         CFG_WHAT, file, key, NSP_EMU_PATH_MAX - 1);
    }
    return NSP_OK;
}

/* A preset name has no '/' and does not end in ".json". */
static int cfg_is_file(const char *target)
{
    size_t n = strlen(target);

    return strchr(target, '/') != NULL || (n > 5 && strcmp(target + n - 5, ".json") == 0);
}

static nsp_status_t cfg_keys(const nsp_json_t *root, const char *file)
{
    static const char *const known[] = {"target", "here", "link", "math", "trace"};

    for (size_t i = 0; i < root->count; ++i) {
        size_t k = 0;
        while (k < sizeof(known) / sizeof(known[0]) && strcmp(root->keys[i], known[k]) != 0) {
            ++k;
        }
        if (k == sizeof(known) / sizeof(known[0])) {
            return nsp_error(NSP_ERR_INVALID_ARG, "%s: %s:%d: unknown key \"%s\" (known: "
                             "target, here, link, math, trace)", CFG_WHAT, file,
                             root->items[i].line, root->keys[i]);
        }
    }
    return NSP_OK;
}

static nsp_status_t cfg_link(const nsp_json_t *root, const char *file, nsp_emu_config_t *c)
{
    const nsp_json_t *v = nsp_json_get(root, "link");
    const char       *s = "inter";

    if (v != NULL) {
        NSP_CHECK(nsp_json_as_string(v, "link", &s));
    }
    if (strcmp(s, "inter") == 0) {
        c->link = NSP_EMU_LINK_INTER;
    } else if (strcmp(s, "intra") == 0) {
        c->link = NSP_EMU_LINK_INTRA;
    } else {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: %s: link \"%s\": use \"inter\" or \"intra\"",
                         CFG_WHAT, file, s);
    }
    return NSP_OK;
}

static nsp_status_t cfg_read(const nsp_json_t *root, const char *file, nsp_emu_config_t *c)
{
    const nsp_json_t *v;
    const char       *s;
    int64_t           trace = 0;

    NSP_CHECK(nsp_json_expect(root, NSP_JSON_OBJECT, "the emulated device's file"));
    NSP_CHECK(cfg_keys(root, file));
    NSP_CHECK(nsp_json_require(root, "target", "the emulated device's file", &v));
    NSP_CHECK(nsp_json_as_string(v, "target", &s));
    c->target_is_file = cfg_is_file(s);
    if (c->target_is_file) {
        NSP_CHECK(cfg_path(file, s, "target", c->target));
    } else {
        snprintf(c->target, sizeof(c->target), "%s", s);
    }
    NSP_CHECK(nsp_json_require(root, "here", "the emulated device's file", &v));
    NSP_CHECK(nsp_json_as_string(v, "here", &s));
    NSP_CHECK(cfg_path(file, s, "here", c->here));
    NSP_CHECK(cfg_link(root, file, c));
    if ((v = nsp_json_get(root, "math")) != NULL) {
        NSP_CHECK(nsp_json_as_bool(v, "math", &c->math));
    }
    if ((v = nsp_json_get(root, "trace")) != NULL) {
        NSP_CHECK(nsp_json_as_int64(v, "trace", &trace));
    }
    if (trace < 0 || trace > (1 << 24)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: %s: trace %lld (0 .. %d ops)", CFG_WHAT, file,
                         (long long)trace, 1 << 24);
    }
    c->trace = (size_t)trace;
    return NSP_OK;
}

nsp_status_t nsp_emu_config_load(const char *file, nsp_emu_config_t *cfg)
{
    nsp_emu_config_t c;
    nsp_json_t      *root = NULL;
    nsp_status_t     status;

    if (file == NULL || cfg == NULL || file[0] == '\0') {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: no FILE given", CFG_WHAT);
    }
    memset(&c, 0, sizeof(c));
    if (strlen(file) >= sizeof(c.file)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: FILE longer than %zu bytes", CFG_WHAT,
                         sizeof(c.file) - 1);
    }
    snprintf(c.file, sizeof(c.file), "%s", file);
    NSP_CHECK(nsp_json_parse_file(file, &root));
    status = cfg_read(root, file, &c);
    nsp_json_free(root);
    if (status == NSP_OK) {
        *cfg = c;
    }
    return status;
}

nsp_status_t nsp_emu_config_from_env(const char *value, int *on, nsp_emu_config_t *cfg)
{
    if (value == NULL || value[0] == '\0') {
        *on = 0;
        return NSP_OK;
    }
    if (strncmp(value, "emu:", 4) != 0 || value[4] == '\0') {
        return nsp_error(NSP_ERR_INVALID_ARG, "NSPCOMM_DEVICE=%s: use emu:FILE (the emulated "
                         "device, docs/design/emulated-device.md), or leave it unset", value);
    }
    NSP_CHECK(nsp_emu_config_load(value + 4, cfg));
    *on = 1;
    return NSP_OK;
}

/* One attention layer with these heads: only the attention rates and the
 * link are read by the timing (hidden, ffn and params only need to be
 * valid for the cost model). */
static void cfg_model(int q_heads, int kv_heads, int head_dim, nsp_model_t *m)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "emu-attn-%d-%d-%d", q_heads, kv_heads, head_dim);
    m->layers   = 1;
    m->q_heads  = q_heads;
    m->kv_heads = kv_heads;
    m->head_dim = head_dim;
    m->hidden   = q_heads * head_dim;
    m->ffn      = 4.0 * m->hidden;
    m->params   = 12.0 * (double)m->hidden * m->hidden;
}

nsp_status_t nsp_emu_config_timing(const nsp_emu_config_t *cfg, int q_heads, int kv_heads,
                                   int head_dim, nsp_emu_timing_t *timing)
{
    nsp_cluster_t target, here;
    nsp_model_t   model;

    if (cfg->target_is_file) {
        NSP_CHECK(nsp_cluster_load(cfg->target, &target));
    } else {
        /* 1024 ranks: any preset's multiple of ranks per node; the timing
         * reads rates only */
        NSP_CHECK(nsp_cluster_preset(cfg->target, 1024, &target));
    }
    NSP_CHECK(nsp_cluster_load(cfg->here, &here));
    cfg_model(q_heads, kv_heads, head_dim, &model);
    return nsp_emu_timing_init(timing, &model, &target, &here, cfg->link);
}

const char *nsp_emu_link_name(nsp_emu_link_t link)
{
    return link == NSP_EMU_LINK_INTRA ? "intra" : "inter";
}
