/* The JSON reader/writer: values, line numbers, errors, fuzzing, round trips. */
#include "common/json.h"
#include "common/log.h"
#include "random_plan.h"
#include "tap.h"

#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static nsp_json_t *parse(const char *text)
{
    nsp_json_t *root = NULL;

    if (nsp_json_parse(text, strlen(text), "<test>", &root) != NSP_OK) {
        return NULL;
    }
    return root;
}

static void test_values(void)
{
    const char *text =
        "{\n"
        "  \"name\": \"qwen\\n\\\"x\\\"\\u00e9\\ud83d\\ude00\",\n"
        "  \"layers\": 48,\n"
        "  \"params\": 30.5e9,\n"
        "  \"neg\": -0.25,\n"
        "  \"big\": 9007199254740993,\n"
        "  \"min\": -9223372036854775808,\n"
        "  \"over\": 9223372036854775808,\n"
        "  \"flags\": [true, false, null],\n"
        "  \"nested\": {\"a\": [[], {}], \"b\": 1e3}\n"
        "}\n";
    nsp_json_t       *root = parse(text);
    const nsp_json_t *v;

    if (!tap_ok(root != NULL, "a valid document parses")) {
        tap_diag("%s", nsp_last_error());
        return;
    }
    tap_is_int(root->type, NSP_JSON_OBJECT, "root is an object");
    tap_is_int((int64_t)root->count, 9, "with 9 members");
    v = nsp_json_get(root, "name");
    tap_is_str(v ? v->string : NULL, "qwen\n\"x\"\xc3\xa9\xf0\x9f\x98\x80",
               "escapes, \\u00e9 and a surrogate pair decode to UTF-8");
    tap_is_int(v ? v->line : 0, 2, "a value remembers its line");
    v = nsp_json_get(root, "layers");
    tap_ok(v && v->is_int && v->integer == 48 && v->number == 48.0, "integer 48 is exact");
    tap_is_int(v ? v->line : 0, 3, "line of layers");
    v = nsp_json_get(root, "params");
    tap_ok(v && v->number == 30.5e9 && v->is_int && v->integer == 30500000000ll,
           "30.5e9 is a double and an exact integer");
    v = nsp_json_get(root, "neg");
    tap_ok(v && v->number == -0.25 && !v->is_int, "-0.25 is not an integer");
    v = nsp_json_get(root, "big");
    tap_ok(v && v->is_int && v->integer == 9007199254740993ll,
           "2^53+1 keeps its exact int64 value");
    v = nsp_json_get(root, "min");
    tap_ok(v && v->is_int && v->integer == INT64_MIN, "INT64_MIN is exact");
    v = nsp_json_get(root, "over");
    tap_ok(v && !v->is_int && v->number == 9223372036854775808.0,
           "2^63 overflows int64 and stays a double");
    v = nsp_json_get(root, "flags");
    tap_ok(v && v->type == NSP_JSON_ARRAY && v->count == 3 && v->items[0].type == NSP_JSON_BOOL &&
           v->items[0].boolean == 1 && v->items[1].boolean == 0 &&
           v->items[2].type == NSP_JSON_NULL, "true, false, null");
    v = nsp_json_get(nsp_json_get(root, "nested"), "b");
    tap_ok(v && v->is_int && v->integer == 1000, "1e3 is the integer 1000");
    tap_ok(nsp_json_get(root, "missing") == NULL, "absent key gives NULL");
    nsp_json_free(root);
}

typedef struct bad_case {
    const char *text;
    int         line;
    const char *words;   /* expected in the message */
} bad_case_t;

static void test_errors(void)
{
    static const bad_case_t cases[] = {
        {"", 1, "unexpected end"},
        {"{\"a\": 1,\n\"b\": }", 2, "\"b\""},
        {"[1, 2,]", 1, "expected a value"},
        {"{\"a\": 01}", 1, "leading zeros"},
        {"{\"a\" 1}", 1, "expected ':'"},
        {"{'a': 1}", 1, "quoted key"},
        {"{\"a\": \"abc}", 1, "unterminated"},
        {"{\"a\":\n\n tru}", 3, "invalid literal"},
        {"[1 2]", 1, "expected ',' or ']'"},
        {"{\"a\": 1, \"a\": 2}", 1, "duplicate key"},
        {"[\"a\tb\"]", 1, "control character"},
        {"[\"\\x\"]", 1, "invalid escape"},
        {"[\"\\udc00\"]", 1, "surrogate"},
        {"[\"\\ud800x\"]", 1, "surrogate"},
        {"[\"\\u12\"]", 1, "4 hex digits"},
        {"[\"\\u0000\"]", 1, "NUL"},
        {"{} x", 1, "after the JSON value"},
        {"[NaN]", 1, "expected a value"},
        {"[-Infinity]", 1, "digit must follow '-'"},
        {"[1e400]", 1, "out of the range"},
        {"[1.]", 1, "digit must follow '.'"},
        {"[1e]", 1, "exponent"},
        {"{\"a\": [1,\n2,\n{\"b\": [}\n]}", 3, "\"b\""},
        {"\n\n{\"k\": 1", 3, "missing '}'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        nsp_json_t  *root = NULL;
        nsp_status_t st = nsp_json_parse(cases[i].text, strlen(cases[i].text), "bad.json", &root);
        char         where[32];
        const char  *msg = nsp_last_error();

        snprintf(where, sizeof(where), "bad.json:%d:", cases[i].line);
        tap_ok(st == NSP_ERR_PARSE && root == NULL && strstr(msg, where) == msg &&
               strstr(msg, cases[i].words) != NULL,
               "malformed case %zu gives NSP_ERR_PARSE at line %d naming '%s'", i,
               cases[i].line, cases[i].words);
        if (st != NSP_ERR_PARSE || strstr(msg, cases[i].words) == NULL) {
            tap_diag("status %d, message: %s", st, msg);
        }
        nsp_json_free(root);
    }
}

static void test_depth(void)
{
    char        deep[4 * NSP_JSON_MAX_DEPTH + 8];
    nsp_json_t *root = NULL;
    size_t      n = 0;

    for (int i = 0; i < 2 * NSP_JSON_MAX_DEPTH; ++i) {
        deep[n++] = '[';
    }
    for (int i = 0; i < 2 * NSP_JSON_MAX_DEPTH; ++i) {
        deep[n++] = ']';
    }
    tap_is_int(nsp_json_parse(deep, n, "deep", &root), NSP_ERR_PARSE,
               "nesting deeper than %d is refused, not a stack overflow", NSP_JSON_MAX_DEPTH);
    tap_ok(strstr(nsp_last_error(), "too deeply") != NULL, "and the message says so");
    n = 0;
    for (int i = 0; i < NSP_JSON_MAX_DEPTH; ++i) {
        deep[n++] = '[';
    }
    for (int i = 0; i < NSP_JSON_MAX_DEPTH; ++i) {
        deep[n++] = ']';
    }
    tap_is_int(nsp_json_parse(deep, n, "deep", &root), NSP_OK, "nesting of exactly %d parses",
               NSP_JSON_MAX_DEPTH);
    nsp_json_free(root);
}

/* A plan-like document used as the seed of the fuzzing below. */
static const char fuzz_seed[] =
    "{\n"
    "  \"format\": \"nspcomm-plan-v1\",\n"
    "  \"planner\": \"nested\",\n"
    "  \"model\": {\"name\": \"m\\u00e9\", \"layers\": 48, \"ffn\": 6144.5e0},\n"
    "  \"seq_lens\": [393216, 5120, 812, -1, 0.5, 1e-3],\n"
    "  \"rounds\": [{\"groups\": [{\"rank0\": 0, \"size\": 32, \"seqs\": [0],"
    " \"recompute\": true, \"pipelined\": false, \"x\": null}]}],\n"
    "  \"predicted\": {\"step_s\": 17.226, \"rank_s\": [], \"esc\": \"a\\\"b\\\\c\\n\"}\n"
    "}\n";

static void test_fuzz(void)
{
    const size_t len = strlen(fuzz_seed);
    uint64_t     st = 12345;
    int          bad_status = 0, bad_line = 0, ok_count = 0;
    char         buf[sizeof(fuzz_seed)];

    /* Every truncation of the document is malformed (it is one object). */
    for (size_t n = 0; n < len - 1; ++n) {
        nsp_json_t  *root = NULL;
        nsp_status_t s = nsp_json_parse(fuzz_seed, n, "trunc", &root);
        if (s != NSP_ERR_PARSE || root != NULL) {
            ++bad_status;
            nsp_json_free(root);
        } else if (strncmp(nsp_last_error(), "trunc:", 6) != 0) {
            ++bad_line;
        }
    }
    tap_is_int(bad_status, 0, "all %zu truncations give NSP_ERR_PARSE", len - 1);
    tap_is_int(bad_line, 0, "and every message names the source and line");

    /* Random byte mutations: OK or NSP_ERR_PARSE, never anything else. */
    bad_status = 0;
    for (int iter = 0; iter < 20000; ++iter) {
        nsp_json_t  *root = NULL;
        nsp_status_t s;
        int          nmut = (int)rp_range(&st, 1, 4);
        memcpy(buf, fuzz_seed, len);
        for (int m = 0; m < nmut; ++m) {
            size_t pos = (size_t)rp_range(&st, 0, (int64_t)len - 1);
            static const char interesting[] = "{}[],:\"\\-+.eE0u \n";
            buf[pos] = rp_range(&st, 0, 1) ? (char)rp_range(&st, 0, 255)
                                           : interesting[rp_range(&st, 0, sizeof(interesting) - 2)];
        }
        s = nsp_json_parse(buf, (size_t)rp_range(&st, 1, (int64_t)len), "fuzz", &root);
        if (s == NSP_OK) {
            ++ok_count;
            nsp_json_free(root);
        } else if (s != NSP_ERR_PARSE || root != NULL) {
            ++bad_status;
        }
    }
    tap_is_int(bad_status, 0, "20000 mutated documents give NSP_OK or NSP_ERR_PARSE (%d parsed)",
               ok_count);
}

static char *write_to_string(void (*fill)(nsp_json_writer_t *), nsp_status_t *status)
{
    char             *text = NULL;
    size_t            len = 0;
    FILE             *f = open_memstream(&text, &len);
    nsp_json_writer_t w;

    nsp_json_writer_init(&w, f, 2);
    fill(&w);
    *status = nsp_json_writer_finish(&w);
    fclose(f);
    return text;
}

static const double tricky[] = {0.1, 1.0 / 3.0, 1e300, -0.0, 5e-324, 85899345920.0,
                                17.22620364515514, 2.2250738585072014e-308, 123456789.0};

static void fill_small(nsp_json_writer_t *w)
{
    nsp_json_begin_object(w, NULL, 0);
    nsp_json_string(w, "s", "a\"b\\c\n\x01");
    nsp_json_int(w, "i", -42);
    nsp_json_begin_array(w, "inline", 1);
    nsp_json_int(w, NULL, 1);
    nsp_json_begin_object(w, NULL, 0);   /* inside inline: stays inline */
    nsp_json_bool(w, "t", 1);
    nsp_json_null(w, "n");
    nsp_json_end(w);
    nsp_json_end(w);
    nsp_json_begin_array(w, "empty", 0);
    nsp_json_end(w);
    nsp_json_end(w);
}

static void fill_doubles(nsp_json_writer_t *w)
{
    nsp_json_begin_array(w, NULL, 1);
    for (size_t i = 0; i < sizeof(tricky) / sizeof(tricky[0]); ++i) {
        nsp_json_double(w, NULL, tricky[i]);
    }
    nsp_json_end(w);
}

static void fill_nan(nsp_json_writer_t *w)
{
    nsp_json_begin_object(w, NULL, 0);
    nsp_json_double(w, "bad", NAN);
    nsp_json_end(w);
}

static void fill_unbalanced(nsp_json_writer_t *w)
{
    nsp_json_begin_object(w, NULL, 0);
}

static void test_writer(void)
{
    nsp_status_t st;
    char        *text = write_to_string(fill_small, &st);
    nsp_json_t  *root;
    int          exact = 1;

    tap_is_int(st, NSP_OK, "writer finishes");
    tap_is_str(text,
               "{\n  \"s\": \"a\\\"b\\\\c\\n\\u0001\",\n  \"i\": -42,\n"
               "  \"inline\": [1, {\"t\": true, \"n\": null}],\n  \"empty\": []\n}",
               "writer output: indentation, inline containers, escapes");
    root = parse(text);
    tap_ok(root != NULL && strcmp(nsp_json_get(root, "s")->string, "a\"b\\c\n\x01") == 0,
           "a written string reads back");
    nsp_json_free(root);
    free(text);

    text = write_to_string(fill_doubles, &st);
    root = parse(text);
    for (size_t i = 0; root != NULL && i < sizeof(tricky) / sizeof(tricky[0]); ++i) {
        exact &= memcmp(&root->items[i].number, &tricky[i], sizeof(double)) == 0;
    }
    tap_ok(root != NULL && exact, "doubles written with %%.17g read back bit for bit: %s", text);
    nsp_json_free(root);
    free(text);

    text = write_to_string(fill_nan, &st);
    tap_is_int(st, NSP_ERR_INVALID_ARG, "a NaN cannot be written");
    tap_ok(strstr(nsp_last_error(), "\"bad\"") != NULL, "and the message names the key");
    free(text);
    text = write_to_string(fill_unbalanced, &st);
    tap_is_int(st, NSP_ERR_INTERNAL, "an unclosed container is reported");
    free(text);
}

static void test_locale(void)
{
    const char *names[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8"};
    const char *set = NULL;

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && set == NULL; ++i) {
        set = setlocale(LC_NUMERIC, names[i]);
    }
    if (set == NULL) {
        tap_skip(2, "no locale with a decimal comma installed");
        return;
    }
    {
        nsp_status_t st;
        char        *text = write_to_string(fill_doubles, &st);
        nsp_json_t  *root = parse(text);
        tap_ok(text != NULL && strchr(text, '.') != NULL, "decimal point is '.' under %s", set);
        tap_ok(root != NULL && root->items[0].number == 0.1, "and reads back under %s", set);
        nsp_json_free(root);
        free(text);
    }
    setlocale(LC_NUMERIC, "C");
}

int main(void)
{
    /* The fuzzing decides thousands of errors; keep them out of the log. */
    setenv("NSPCOMM_LOG_FILE", "/dev/null", 1);
    test_values();
    test_errors();
    test_depth();
    test_fuzz();
    test_writer();
    test_locale();
    return tap_done();
}
