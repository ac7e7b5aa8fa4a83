/* Fuzz target: the JSON reader (src/common/json.c) on arbitrary bytes. */
#include "fuzz.h"

#include "common/json.h"

int FUZZ_ENTRY(const uint8_t *data, size_t size)
{
    nsp_json_t *root = NULL;

    fuzz_quiet();
    if (nsp_json_parse((const char *)data, size, "<fuzz>", &root) == NSP_OK) {
        nsp_json_free(root);
    }
    return 0;
}
