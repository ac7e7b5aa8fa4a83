/* Fuzz target: model and cluster files (the JSON objects nsp_model_load
 * and nsp_cluster_load read), both from the same bytes. */
#include "fuzz.h"

#include "nspcomm.h"
#include "common/json.h"
#include "planner/planner_io.h"

int FUZZ_ENTRY(const uint8_t *data, size_t size)
{
    nsp_json_t   *root = NULL;
    nsp_model_t   model;
    nsp_cluster_t cluster;

    fuzz_quiet();
    if (nsp_json_parse((const char *)data, size, "<fuzz>", &root) != NSP_OK) {
        return 0;
    }
    (void)nsp_model_from_json(root, "fuzz", &model);
    (void)nsp_cluster_from_json(root, "fuzz", &cluster);
    nsp_json_free(root);
    return 0;
}
