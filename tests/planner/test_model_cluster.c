/* Presets, and model/cluster descriptions loaded from JSON files (good and bad). */
#include "common/log.h"
#include "random_plan.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int model_equal(const nsp_model_t *a, const nsp_model_t *b)
{
    return strcmp(a->name, b->name) == 0 && a->layers == b->layers && a->hidden == b->hidden &&
           a->q_heads == b->q_heads && a->kv_heads == b->kv_heads &&
           a->head_dim == b->head_dim && a->ffn == b->ffn && a->experts == b->experts &&
           a->topk == b->topk && a->params == b->params;
}

static int cluster_equal(const nsp_cluster_t *a, const nsp_cluster_t *b)
{
    return strcmp(a->name, b->name) == 0 && a->ranks == b->ranks &&
           a->ranks_per_node == b->ranks_per_node && a->mem_bytes == b->mem_bytes &&
           a->workspace_bytes == b->workspace_bytes && a->gemm_flops == b->gemm_flops &&
           a->attn_flops == b->attn_flops && a->bw_intra == b->bw_intra &&
           a->bw_inter == b->bw_inter && a->lat_intra == b->lat_intra &&
           a->lat_inter == b->lat_inter && a->overlap == b->overlap;
}

static int msg_has(const char *words)
{
    if (strstr(nsp_last_error(), words) != NULL) {
        return 1;
    }
    tap_diag("message \"%s\" lacks \"%s\"", nsp_last_error(), words);
    return 0;
}

static void test_presets(void)
{
    static const char *const models[] = {"qwen3-30b-a3b", "qwen3-235b-a22b", "llama3-8b"};
    nsp_model_t   m;
    nsp_cluster_t c;

    for (int i = 0; i < 3; ++i) {
        tap_is_int(nsp_model_preset(models[i], &m), NSP_OK, "model preset %s", models[i]);
    }
    nsp_model_preset("qwen3-30b-a3b", &m);
    tap_ok(m.layers == 48 && m.hidden == 2048 && m.q_heads == 32 && m.kv_heads == 4 &&
           m.head_dim == 128 && m.ffn == 6144 && m.experts == 128 && m.topk == 8 &&
           m.params == 30.5e9, "qwen3-30b-a3b has the numbers of docs/design.md §5.1");
    tap_is_int(nsp_model_preset("gpt-5", &m), NSP_ERR_NOT_FOUND, "unknown model preset");
    tap_ok(msg_has("gpt-5") && msg_has("qwen3-30b-a3b") && msg_has("qwen3-235b-a22b") &&
           msg_has("llama3-8b"), "the message names it and lists the known presets");
    tap_is_int(nsp_cluster_preset("h100", 64, &c), NSP_OK, "cluster preset h100 x 64");
    tap_ok(c.ranks == 64 && c.ranks_per_node == 8 && c.bw_intra == 300e9 && c.bw_inter == 45e9 &&
           c.mem_bytes == 80.0 * 1073741824.0, "h100 has the numbers of docs/design.md §5.1");
    tap_is_int(nsp_cluster_preset("h800", 16, &c), NSP_OK, "cluster preset h800 x 16");
    tap_is_int(nsp_cluster_preset("a100", 64, &c), NSP_ERR_NOT_FOUND, "unknown cluster preset");
    tap_ok(msg_has("a100") && msg_has("h100") && msg_has("h800"),
           "the message names it and lists the known presets");
    tap_is_int(nsp_cluster_preset("h100", 12, &c), NSP_ERR_INVALID_ARG,
               "12 ranks are not a multiple of 8 ranks per node");
    tap_ok(msg_has("12") && msg_has("multiple"), "the message says so");
    tap_is_int(nsp_cluster_preset("h100", 0, &c), NSP_ERR_INVALID_ARG, "0 ranks");
    tap_is_int(nsp_model_preset(NULL, &m), NSP_ERR_INVALID_ARG, "NULL name");
}

static void test_shipped_files(void)
{
    static const char *const models[] = {"qwen3-30b-a3b", "qwen3-235b-a22b", "llama3-8b"};
    static const char *const clusters[] = {"h100", "h800"};
    nsp_model_t   m, p;
    nsp_cluster_t c, q;
    char          rel[128];

    for (int i = 0; i < 3; ++i) {
        snprintf(rel, sizeof(rel), "data/models/%s.json", models[i]);
        nsp_model_preset(models[i], &p);
        tap_ok(nsp_model_load(rp_srcdir_path(rel), &m) == NSP_OK && model_equal(&m, &p),
               "%s equals the preset", rel);
    }
    for (int i = 0; i < 2; ++i) {
        snprintf(rel, sizeof(rel), "data/clusters/%s.json", clusters[i]);
        nsp_cluster_preset(clusters[i], 64, &q);
        tap_ok(nsp_cluster_load(rp_srcdir_path(rel), &c) == NSP_OK && cluster_equal(&c, &q),
               "%s equals the preset at 64 ranks", rel);
    }
    tap_is_int(nsp_cluster_load(rp_srcdir_path("data/clusters/h100-measured.example.json"), &c),
               NSP_OK, "the measured-numbers example loads");
    nsp_cluster_preset("h100", 128, &q);
    tap_ok(strcmp(c.name, "h100-measured") == 0 && c.ranks == 128 && c.bw_inter == 4.1e10 &&
           c.lat_inter == 6e-5 && c.bw_intra == q.bw_intra && c.mem_bytes == q.mem_bytes &&
           c.overlap == q.overlap, "it overrides the measured keys and keeps the base's others");
    tap_is_int(nsp_cluster_load(rp_srcdir_path("data/clusters/cpu-loopback.json"), &c), NSP_OK,
               "the CPU loopback cluster loads");
}

typedef struct bad_file {
    int          is_model;
    const char  *text;
    nsp_status_t status;
    int          line;       /* 0: the message need not name a line */
    const char  *words;
} bad_file_t;

static void test_bad_files(void)
{
    static const bad_file_t cases[] = {
        {1, "{\n\"base\": \"qwen3-30b-a3b\",\n\"layers\": 48,,\n}", NSP_ERR_PARSE, 3, ""},
        {1, "{\"base\": \"qwen3-30b-a3b\",\n \"layer\": 48}", NSP_ERR_PARSE, 2, "\"layer\""},
        {1, "{\"base\": \"qwen3-30b-a3b\",\n \"layers\": \"48\"}", NSP_ERR_PARSE, 2, "\"layers\""},
        {1, "{\"base\": \"qwen3-30b-a3b\",\n \"layers\": 48.5}", NSP_ERR_PARSE, 2, "integer"},
        {1, "{\"base\": \"qwen3-30b-a3b\",\n\n \"layers\": 0}", NSP_ERR_INVALID_ARG, 3, "\"layers\""},
        {1, "{\"base\": \"qwen3-30b-a3b\", \"ffn\": -1}", NSP_ERR_INVALID_ARG, 1, "\"ffn\""},
        {1, "{\"base\": \"qwen3-30b-a3b\", \"kv_heads\": 5}", NSP_ERR_INVALID_ARG, 1, "kv_heads"},
        {1, "{\"base\": \"qwen3-30b-a3b\", \"topk\": 200}", NSP_ERR_INVALID_ARG, 1, "topk"},
        {1, "{\n \"base\": \"gpt-5\"}", NSP_ERR_NOT_FOUND, 2, "qwen3-30b-a3b"},
        {1, "{\"name\": \"x\", \"layers\": 2, \"hidden\": 64, \"q_heads\": 4, \"kv_heads\": 4,\n"
            " \"head_dim\": 16, \"ffn\": 128, \"topk\": 0, \"experts\": 0}", NSP_ERR_PARSE, 1,
         "\"params\""},
        {1, "[1, 2]", NSP_ERR_PARSE, 1, "object"},
        {0, "{\"base\": \"h100\",\n \"overlap\": 1.5}", NSP_ERR_INVALID_ARG, 2, "\"overlap\""},
        {0, "{\"base\": \"h100\",\n \"ranks\": 12}", NSP_ERR_INVALID_ARG, 2, "multiple"},
        {0, "{\"base\": \"h100\", \"bw_inter\": 0}", NSP_ERR_INVALID_ARG, 1, "\"bw_inter\""},
        {0, "{\"base\": \"h100\", \"workspace_bytes\": 1e12}", NSP_ERR_INVALID_ARG, 1,
         "workspace_bytes"},
        {0, "{\"base\": \"a100\"}", NSP_ERR_NOT_FOUND, 1, "h800"},
        {0, "{\"name\": \"c\", \"ranks\": 8}", NSP_ERR_PARSE, 1, "\"ranks_per_node\""},
        {0, "{\"base\": \"h100\", \"ranks\": 1e100}", NSP_ERR_PARSE, 1, "\"ranks\""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        const bad_file_t *bc = &cases[i];
        const char       *path = rp_temp_file(bc->text);
        char              where[128];
        nsp_model_t       m;
        nsp_cluster_t     c;
        nsp_status_t      st;

        if (path == NULL) {
            tap_ok(0, "write a temporary file");
            continue;
        }
        st = bc->is_model ? nsp_model_load(path, &m) : nsp_cluster_load(path, &c);
        snprintf(where, sizeof(where), "%s:%d:", path, bc->line);
        tap_ok(st == bc->status && strstr(nsp_last_error(), where) != NULL && msg_has(bc->words),
               "bad %s file %zu: %s at line %d naming '%s'", bc->is_model ? "model" : "cluster",
               i, nsp_status_string(bc->status), bc->line, bc->words);
        if (st != bc->status || strstr(nsp_last_error(), where) == NULL) {
            tap_diag("got %d: %s", st, nsp_last_error());
        }
        unlink(path);
    }
}

static void test_good_files(void)
{
    nsp_model_t   m;
    nsp_cluster_t c;
    const char   *path;

    path = rp_temp_file("{\"_comment\": \"a small dense model\", \"name\": \"tiny\", \"layers\": 2,"
                        " \"hidden\": 64, \"q_heads\": 4, \"kv_heads\": 2, \"head_dim\": 16,"
                        " \"ffn\": 128, \"topk\": 0, \"experts\": 0, \"params\": 1e6}");
    tap_ok(path != NULL && nsp_model_load(path, &m) == NSP_OK && strcmp(m.name, "tiny") == 0 &&
           m.kv_heads == 2 && m.params == 1e6, "a complete model file without base loads");
    if (path) {
        unlink(path);
    }
    path = rp_temp_file("{\"base\": \"llama3-8b\", \"layers\": 16}");
    tap_ok(path != NULL && nsp_model_load(path, &m) == NSP_OK && m.layers == 16 &&
           m.hidden == 4096 && strncmp(m.name, "nsp_test_", 9) == 0,
           "a base model with one override; the name defaults to the file's stem");
    if (path) {
        unlink(path);
    }
    path = rp_temp_file("{\"base\": \"h800\", \"name\": \"one-node\"}");
    tap_ok(path != NULL && nsp_cluster_load(path, &c) == NSP_OK && c.ranks == 8 &&
           c.ranks_per_node == 8 && c.bw_intra == 150e9 && strcmp(c.name, "one-node") == 0,
           "a base cluster without ranks is one node");
    if (path) {
        unlink(path);
    }
    tap_is_int(nsp_model_load("/nonexistent/model.json", &m), NSP_ERR_IO, "a missing file");
    tap_ok(msg_has("/nonexistent/model.json"), "the message names the path");
}

int main(void)
{
    test_presets();
    test_shipped_files();
    test_bad_files();
    test_good_files();
    return tap_done();
}
