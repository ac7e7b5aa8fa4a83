/* Fuzz target: plan JSON (nsp_plan_read_json, which validates the plan). */
#include "fuzz.h"

#include "nspcomm.h"

#include <stdlib.h>
#include <string.h>

int FUZZ_ENTRY(const uint8_t *data, size_t size)
{
    char       *text = malloc(size + 1); /* the reader takes a C string */
    nsp_plan_t *plan = NULL;

    if (text == NULL) {
        return 0;
    }
    fuzz_quiet();
    memcpy(text, data, size);
    text[size] = '\0';
    if (nsp_plan_read_json(text, &plan) == NSP_OK) {
        nsp_plan_free(plan);
    }
    free(text);
    return 0;
}
