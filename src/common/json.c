/* A small JSON reader (DOM, line numbers) and writer; see json.h. */
#include "common/json.h"
#include "common/log.h"

#include <errno.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* Reader                                                                   */
/* ======================================================================== */

typedef struct json_parser {
    const char *pos;     /* next byte */
    const char *end;     /* one past the last byte */
    const char *source;  /* name for messages (owned by the root) */
    int         line;    /* 1-based line of `pos` */
    int         depth;   /* open containers */
    const char *key;     /* innermost member key being parsed, for messages */
} json_parser_t;

static nsp_status_t parse_value(json_parser_t *p, nsp_json_t *v);

/* Decide a parse error at the parser's current line, naming the innermost key. */
static nsp_status_t parse_error(const json_parser_t *p, const char *what)
{
    if (p->key != NULL) {
        return nsp_error(NSP_ERR_PARSE, "%s:%d: %s (in the value of key \"%.64s\")",
                         p->source, p->line, what, p->key);
    }
    return nsp_error(NSP_ERR_PARSE, "%s:%d: %s", p->source, p->line, what);
}

static nsp_status_t no_memory(const json_parser_t *p)
{
    return nsp_error(NSP_ERR_NO_MEMORY, "%s:%d: out of memory while parsing JSON",
                     p->source, p->line);
}

static void skip_space(json_parser_t *p)
{
    while (p->pos < p->end) {
        char c = *p->pos;
        if (c == '\n') {
            ++p->line;
        } else if (c != ' ' && c != '\t' && c != '\r') {
            return;
        }
        ++p->pos;
    }
}

/* Free what a value owns (not the value itself). */
static void value_clear(nsp_json_t *v)
{
    if (v->type == NSP_JSON_STRING) {
        free(v->string);
    } else if (v->type == NSP_JSON_ARRAY || v->type == NSP_JSON_OBJECT) {
        for (size_t i = 0; i < v->count; ++i) {
            value_clear(&v->items[i]);
            if (v->keys != NULL) {
                free(v->keys[i]);
            }
        }
        free(v->items);
        free(v->keys);
    }
    v->type = NSP_JSON_NULL;
    v->count = 0;
    v->items = NULL;
    v->keys = NULL;
    v->string = NULL;
}

static nsp_status_t parse_literal(json_parser_t *p, const char *word, nsp_json_t *v,
                                  nsp_json_type_t type, int boolean)
{
    size_t n = strlen(word);

    if ((size_t)(p->end - p->pos) < n || memcmp(p->pos, word, n) != 0) {
        return parse_error(p, "invalid literal (expected true, false, null, a number, "
                              "a string, an array or an object)");
    }
    p->pos += n;
    v->type = type;
    v->boolean = boolean;
    return NSP_OK;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/* Four hex digits after "\u"; -1 if malformed or truncated. */
static long read_hex4(json_parser_t *p)
{
    long code = 0;

    if (p->end - p->pos < 4) {
        return -1;
    }
    for (int i = 0; i < 4; ++i) {
        int h = hex_value(p->pos[i]);
        if (h < 0) {
            return -1;
        }
        code = code * 16 + h;
    }
    p->pos += 4;
    return code;
}

/* Append code point `cp` as UTF-8 to out[*n]; out has room for 4 more bytes. */
static void put_utf8(char *out, size_t *n, unsigned long cp)
{
    if (cp < 0x80) {
        out[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*n)++] = (char)(0xc0 | (cp >> 6));
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out[(*n)++] = (char)(0xe0 | (cp >> 12));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        out[(*n)++] = (char)(0xf0 | (cp >> 18));
        out[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    }
}

/* One "\uXXXX" escape (the "\u" consumed), with a surrogate pair if needed. */
static nsp_status_t parse_unicode_escape(json_parser_t *p, unsigned long *cp)
{
    long hi = read_hex4(p), lo;

    if (hi < 0) {
        return parse_error(p, "\\u must be followed by 4 hex digits");
    }
    if (hi >= 0xdc00 && hi <= 0xdfff) {
        return parse_error(p, "lone low surrogate in \\u escape");
    }
    if (hi >= 0xd800 && hi <= 0xdbff) {
        if (p->end - p->pos < 2 || p->pos[0] != '\\' || p->pos[1] != 'u') {
            return parse_error(p, "high surrogate \\u escape without its low surrogate");
        }
        p->pos += 2;
        lo = read_hex4(p);
        if (lo < 0xdc00 || lo > 0xdfff) {
            return parse_error(p, "high surrogate \\u escape without its low surrogate");
        }
        *cp = 0x10000ul + (((unsigned long)hi - 0xd800) << 10) + ((unsigned long)lo - 0xdc00);
        return NSP_OK;
    }
    if (hi == 0) {
        return parse_error(p, "\\u0000 (NUL) is not supported in strings");
    }
    *cp = (unsigned long)hi;
    return NSP_OK;
}

/* A string starting at the opening quote; *out is malloc'ed, NUL-terminated. */
static nsp_status_t parse_string_raw(json_parser_t *p, char **out)
{
    const char  *start = ++p->pos;   /* after the opening quote */
    size_t       cap, n = 0;
    char        *buf;
    nsp_status_t status;

    /* Escapes only shrink the text (\uXXXX is 6 bytes for at most 4 of UTF-8,
     * a surrogate pair 12 for 4), so the raw length bounds the output. */
    while (p->pos < p->end && *p->pos != '"') {
        p->pos += (*p->pos == '\\' && p->pos + 1 < p->end) ? 2 : 1;
    }
    cap = (size_t)(p->pos - start) + 1;
    p->pos = start;
    buf = malloc(cap);
    if (buf == NULL) {
        return no_memory(p);
    }
    for (;;) {
        unsigned char c;
        if (p->pos >= p->end) {
            status = parse_error(p, "unterminated string (end of input before the closing quote)");
            goto err_free_buf;
        }
        c = (unsigned char)*p->pos++;
        if (c == '"') {
            break;
        }
        if (c < 0x20) {
            status = parse_error(p, c == '\n' ? "unterminated string (newline before the closing quote)"
                                              : "control character in string (escape it)");
            goto err_free_buf;
        }
        if (c != '\\') {
            buf[n++] = (char)c;
            continue;
        }
        if (p->pos >= p->end) {
            status = parse_error(p, "unterminated string (end of input after a backslash)");
            goto err_free_buf;
        }
        c = (unsigned char)*p->pos++;
        switch (c) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u': {
            unsigned long cp = 0;
            NSP_CHECK_GOTO(parse_unicode_escape(p, &cp), status, err_free_buf);
            put_utf8(buf, &n, cp);
            break;
        }
        default:
            status = parse_error(p, "invalid escape in string (valid: \\\" \\\\ \\/ \\b \\f "
                                    "\\n \\r \\t \\uXXXX)");
            goto err_free_buf;
        }
    }
    buf[n] = '\0';
    *out = buf;
    return NSP_OK;

err_free_buf:
    free(buf);
    return status;
}

/* strtod in the C locale whatever the process locale: the decimal point of
 * the current locale replaces '.' in a copy (`text` holds only [-+.eE0-9]). */
static double strtod_c_locale(const char *text, size_t len, int *ok)
{
    char        small[64], *buf = small, *endp;
    const char *dp = localeconv()->decimal_point;
    size_t      dplen = (dp != NULL && dp[0] != '\0') ? strlen(dp) : 1;
    size_t      n = 0;
    double      value;

    if (len * dplen + 1 > sizeof(small)) {
        buf = malloc(len * dplen + 1);
        if (buf == NULL) {
            *ok = 0;
            return 0.0;
        }
    }
    for (size_t i = 0; i < len; ++i) {
        if (text[i] == '.' && dp != NULL && dp[0] != '\0') {
            memcpy(buf + n, dp, dplen);
            n += dplen;
        } else {
            buf[n++] = text[i];
        }
    }
    buf[n] = '\0';
    errno = 0;
    value = strtod(buf, &endp);
    *ok = (endp == buf + n) && !(errno == ERANGE && isinf(value));
    if (buf != small) {
        free(buf);
    }
    return value;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* A number per RFC 8259: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static nsp_status_t parse_number(json_parser_t *p, nsp_json_t *v)
{
    const char *start = p->pos;
    int         integral = 1, ok;
    int64_t     acc = 0;
    int         overflow = 0, negative = 0;

    if (p->pos < p->end && *p->pos == '-') {
        negative = 1;
        ++p->pos;
    }
    if (p->pos >= p->end || !is_digit(*p->pos)) {
        return parse_error(p, "invalid number (a digit must follow '-')");
    }
    if (*p->pos == '0') {
        ++p->pos;
        if (p->pos < p->end && is_digit(*p->pos)) {
            return parse_error(p, "invalid number (no leading zeros)");
        }
    } else {
        while (p->pos < p->end && is_digit(*p->pos)) {
            int digit = *p->pos - '0';
            /* Accumulate negatively so INT64_MIN fits. */
            if (acc < (INT64_MIN + digit) / 10) {
                overflow = 1;
            } else {
                acc = acc * 10 - digit;
            }
            ++p->pos;
        }
    }
    if (p->pos < p->end && *p->pos == '.') {
        integral = 0;
        ++p->pos;
        if (p->pos >= p->end || !is_digit(*p->pos)) {
            return parse_error(p, "invalid number (a digit must follow '.')");
        }
        while (p->pos < p->end && is_digit(*p->pos)) {
            ++p->pos;
        }
    }
    if (p->pos < p->end && (*p->pos == 'e' || *p->pos == 'E')) {
        integral = 0;
        ++p->pos;
        if (p->pos < p->end && (*p->pos == '+' || *p->pos == '-')) {
            ++p->pos;
        }
        if (p->pos >= p->end || !is_digit(*p->pos)) {
            return parse_error(p, "invalid number (a digit must follow the exponent)");
        }
        while (p->pos < p->end && is_digit(*p->pos)) {
            ++p->pos;
        }
    }
    v->type = NSP_JSON_NUMBER;
    v->number = strtod_c_locale(start, (size_t)(p->pos - start), &ok);
    if (!ok) {
        return parse_error(p, "number out of the range of a double");
    }
    if (integral && !overflow && (negative || acc != INT64_MIN)) {
        v->is_int = 1;
        v->integer = negative ? acc : -acc;
    } else if (v->number == floor(v->number) && fabs(v->number) <= 9007199254740992.0) {
        /* 3.0e5 or 1e3: integral and exact in a double. */
        v->is_int = 1;
        v->integer = (int64_t)v->number;
    }
    return NSP_OK;
}

/* Grow a container's arrays to hold one more entry. */
static nsp_status_t container_reserve(json_parser_t *p, nsp_json_t *v, size_t *cap, int keys)
{
    size_t      ncap;
    nsp_json_t *items;

    if (v->count < *cap) {
        return NSP_OK;
    }
    ncap = *cap ? *cap * 2 : 4;
    items = realloc(v->items, ncap * sizeof(*items));
    if (items == NULL) {
        return no_memory(p);
    }
    v->items = items;
    if (keys) {
        char **k = realloc(v->keys, ncap * sizeof(*k));
        if (k == NULL) {
            return no_memory(p);
        }
        v->keys = k;
    }
    *cap = ncap;
    return NSP_OK;
}

static nsp_status_t parse_array(json_parser_t *p, nsp_json_t *v)
{
    size_t       cap = 0;
    nsp_status_t status;

    v->type = NSP_JSON_ARRAY;
    ++p->pos;   /* '[' */
    skip_space(p);
    if (p->pos < p->end && *p->pos == ']') {
        ++p->pos;
        return NSP_OK;
    }
    for (;;) {
        NSP_CHECK(container_reserve(p, v, &cap, 0));
        memset(&v->items[v->count], 0, sizeof(v->items[0]));
        status = parse_value(p, &v->items[v->count]);
        v->count++;   /* counted even on error so value_clear frees it */
        if (status != NSP_OK) {
            return status;
        }
        skip_space(p);
        if (p->pos >= p->end) {
            return parse_error(p, "unexpected end of input inside an array (missing ']')");
        }
        if (*p->pos == ']') {
            ++p->pos;
            return NSP_OK;
        }
        if (*p->pos != ',') {
            return parse_error(p, "expected ',' or ']' after an array element");
        }
        ++p->pos;
    }
}

static nsp_status_t parse_object(json_parser_t *p, nsp_json_t *v)
{
    const char  *outer_key = p->key;
    size_t       cap = 0;
    nsp_status_t status;

    v->type = NSP_JSON_OBJECT;
    ++p->pos;   /* '{' */
    skip_space(p);
    if (p->pos < p->end && *p->pos == '}') {
        ++p->pos;
        return NSP_OK;
    }
    for (;;) {
        char *key = NULL;

        skip_space(p);
        if (p->pos >= p->end) {
            return parse_error(p, "unexpected end of input inside an object (missing '}')");
        }
        if (*p->pos != '"') {
            return parse_error(p, "expected a quoted key in an object");
        }
        NSP_CHECK(parse_string_raw(p, &key));
        for (size_t i = 0; i < v->count; ++i) {
            if (strcmp(v->keys[i], key) == 0) {
                p->key = outer_key;
                status = nsp_error(NSP_ERR_PARSE, "%s:%d: duplicate key \"%.64s\" in an object",
                                   p->source, p->line, key);
                free(key);
                return status;
            }
        }
        status = container_reserve(p, v, &cap, 1);
        if (status != NSP_OK) {
            free(key);
            return status;
        }
        memset(&v->items[v->count], 0, sizeof(v->items[0]));
        v->keys[v->count] = key;
        v->count++;   /* owned by v from here, freed by value_clear on error */
        skip_space(p);
        if (p->pos >= p->end || *p->pos != ':') {
            p->key = key;
            return parse_error(p, "expected ':' after a key");
        }
        ++p->pos;
        p->key = key;
        NSP_CHECK(parse_value(p, &v->items[v->count - 1]));
        p->key = outer_key;
        skip_space(p);
        if (p->pos >= p->end) {
            return parse_error(p, "unexpected end of input inside an object (missing '}')");
        }
        if (*p->pos == '}') {
            ++p->pos;
            return NSP_OK;
        }
        if (*p->pos != ',') {
            p->key = key;
            return parse_error(p, "expected ',' or '}' after a member");
        }
        ++p->pos;
    }
}

static nsp_status_t parse_value(json_parser_t *p, nsp_json_t *v)
{
    nsp_status_t status;

    skip_space(p);
    v->line = p->line;
    v->source = p->source;
    if (p->pos >= p->end) {
        return parse_error(p, "unexpected end of input (expected a value)");
    }
    switch (*p->pos) {
    case '{':
    case '[':
        if (p->depth >= NSP_JSON_MAX_DEPTH) {
            return parse_error(p, "arrays/objects nested too deeply");
        }
        ++p->depth;
        status = (*p->pos == '{') ? parse_object(p, v) : parse_array(p, v);
        --p->depth;
        return status;
    case '"':
        v->type = NSP_JSON_STRING;
        return parse_string_raw(p, &v->string);
    case 't':
        return parse_literal(p, "true", v, NSP_JSON_BOOL, 1);
    case 'f':
        return parse_literal(p, "false", v, NSP_JSON_BOOL, 0);
    case 'n':
        return parse_literal(p, "null", v, NSP_JSON_NULL, 0);
    default:
        if (*p->pos == '-' || is_digit(*p->pos)) {
            return parse_number(p, v);
        }
        return parse_error(p, "unexpected character (expected a value)");
    }
}

/* The root owns the source name in a block allocated right after it. */
nsp_status_t nsp_json_parse(const char *text, size_t len, const char *source,
                            nsp_json_t **root_p)
{
    json_parser_t p;
    nsp_json_t   *root;
    size_t        srclen;
    nsp_status_t  status;

    if (text == NULL || root_p == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_json_parse: NULL argument");
    }
    if (source == NULL) {
        source = "<json>";
    }
    srclen = strlen(source);
    root = calloc(1, sizeof(*root) + srclen + 1);
    if (root == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate a JSON tree for %s", source);
    }
    memcpy((char *)(root + 1), source, srclen + 1);
    p.pos = text;
    p.end = text + len;
    p.source = (const char *)(root + 1);
    p.line = 1;
    p.depth = 0;
    p.key = NULL;
    /* A UTF-8 byte order mark is not JSON, but editors write it. */
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) {
        p.pos += 3;
    }
    NSP_CHECK_GOTO(parse_value(&p, root), status, err_free_root);
    skip_space(&p);
    if (p.pos < p.end) {
        status = parse_error(&p, "unexpected text after the JSON value");
        goto err_free_root;
    }
    *root_p = root;
    return NSP_OK;

err_free_root:
    nsp_json_free(root);
    return status;
}

nsp_status_t nsp_json_parse_file(const char *path, nsp_json_t **root)
{
    FILE        *f;
    char        *buf = NULL;
    size_t       cap = 0, n = 0;
    nsp_status_t status;

    if (path == NULL || root == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_json_parse_file: NULL argument");
    }
    f = fopen(path, "rb");
    if (f == NULL) {
        return nsp_error(NSP_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    }
    for (;;) {
        size_t got;
        if (n == cap) {
            char *nb = realloc(buf, cap ? cap * 2 : 65536);
            if (nb == NULL) {
                status = nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate memory to read %s", path);
                goto out_free_buf;
            }
            buf = nb;
            cap = cap ? cap * 2 : 65536;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            break;
        }
    }
    if (ferror(f)) {
        status = nsp_error(NSP_ERR_IO, "cannot read %s: %s", path, strerror(errno));
        goto out_free_buf;
    }
    status = nsp_json_parse(buf, n, path, root);

out_free_buf:
    free(buf);
    fclose(f);
    return status;
}

void nsp_json_free(nsp_json_t *root)
{
    if (root == NULL) {
        return;
    }
    value_clear(root);
    free(root);
}

const nsp_json_t *nsp_json_get(const nsp_json_t *obj, const char *key)
{
    if (obj == NULL || obj->type != NSP_JSON_OBJECT || key == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < obj->count; ++i) {
        if (strcmp(obj->keys[i], key) == 0) {
            return &obj->items[i];
        }
    }
    return NULL;
}

const char *nsp_json_type_name(nsp_json_type_t type)
{
    switch (type) {
    case NSP_JSON_NULL: return "null";
    case NSP_JSON_BOOL: return "a boolean";
    case NSP_JSON_NUMBER: return "a number";
    case NSP_JSON_STRING: return "a string";
    case NSP_JSON_ARRAY: return "an array";
    case NSP_JSON_OBJECT: return "an object";
    }
    return "an unknown value";
}

nsp_status_t nsp_json_expect(const nsp_json_t *v, nsp_json_type_t type, const char *what)
{
    if (v == NULL) {
        return nsp_error(NSP_ERR_PARSE, "missing value for %s", what);
    }
    if (v->type != type) {
        return nsp_error(NSP_ERR_PARSE, "%s:%d: key \"%s\" must be %s, got %s", v->source,
                         v->line, what, nsp_json_type_name(type), nsp_json_type_name(v->type));
    }
    return NSP_OK;
}

nsp_status_t nsp_json_require(const nsp_json_t *obj, const char *key, const char *what,
                              const nsp_json_t **out)
{
    const nsp_json_t *v = nsp_json_get(obj, key);

    if (v == NULL) {
        if (obj == NULL) {
            return nsp_error(NSP_ERR_PARSE, "missing %s", what);
        }
        return nsp_error(NSP_ERR_PARSE, "%s:%d: %s has no key \"%s\" (required)",
                         obj->source, obj->line, what, key);
    }
    *out = v;
    return NSP_OK;
}

nsp_status_t nsp_json_as_double(const nsp_json_t *v, const char *what, double *out)
{
    NSP_CHECK(nsp_json_expect(v, NSP_JSON_NUMBER, what));
    *out = v->number;
    return NSP_OK;
}

nsp_status_t nsp_json_as_int64(const nsp_json_t *v, const char *what, int64_t *out)
{
    NSP_CHECK(nsp_json_expect(v, NSP_JSON_NUMBER, what));
    if (!v->is_int) {
        return nsp_error(NSP_ERR_PARSE, "%s:%d: key \"%s\" must be an integer, got %.17g",
                         v->source, v->line, what, v->number);
    }
    *out = v->integer;
    return NSP_OK;
}

nsp_status_t nsp_json_as_int(const nsp_json_t *v, const char *what, int *out)
{
    int64_t value = 0;

    NSP_CHECK(nsp_json_as_int64(v, what, &value));
    if (value < INT_MIN || value > INT_MAX) {
        return nsp_error(NSP_ERR_PARSE, "%s:%d: key \"%s\" = %lld does not fit in an int",
                         v->source, v->line, what, (long long)value);
    }
    *out = (int)value;
    return NSP_OK;
}

nsp_status_t nsp_json_as_bool(const nsp_json_t *v, const char *what, int *out)
{
    NSP_CHECK(nsp_json_expect(v, NSP_JSON_BOOL, what));
    *out = v->boolean;
    return NSP_OK;
}

nsp_status_t nsp_json_as_string(const nsp_json_t *v, const char *what, const char **out)
{
    NSP_CHECK(nsp_json_expect(v, NSP_JSON_STRING, what));
    *out = v->string;
    return NSP_OK;
}

/* ======================================================================== */
/* Writer                                                                   */
/* ======================================================================== */

void nsp_json_writer_init(nsp_json_writer_t *w, FILE *out, int indent)
{
    memset(w, 0, sizeof(*w));
    w->out = out;
    w->indent = indent;
    w->status = (out == NULL) ? NSP_ERR_INVALID_ARG : NSP_OK;
}

static void write_escaped(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *c = (const unsigned char *)s; *c != '\0'; ++c) {
        switch (*c) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (*c < 0x20) {
                fprintf(out, "\\u%04x", *c);
            } else {
                fputc(*c, out);
            }
        }
    }
    fputc('"', out);
}

/* Separator, newline and indentation before a value, then its key. Returns 0
 * if the writer is already in error (nothing is written then). */
static int begin_value(nsp_json_writer_t *w, const char *key)
{
    if (w->status != NSP_OK) {
        return 0;
    }
    if (w->depth > 0) {
        int in_object = (w->closer[w->depth] == '}');
        if (in_object != (key != NULL)) {
            w->status = nsp_error(NSP_ERR_INTERNAL, "JSON writer: %s", in_object ?
                                  "a member of an object needs a key" :
                                  "an array element or top-level value takes no key");
            return 0;
        }
        if (w->entries[w->depth] > 0) {
            fputc(',', w->out);
        }
        if (w->inline_from > 0) {
            if (w->entries[w->depth] > 0) {
                fputc(' ', w->out);
            }
        } else {
            fprintf(w->out, "\n%*s", w->indent * w->depth, "");
        }
        w->entries[w->depth]++;
    } else if (w->entries[0]++ > 0) {
        w->status = nsp_error(NSP_ERR_INTERNAL, "JSON writer: a second top-level value");
        return 0;
    }
    if (key != NULL) {
        write_escaped(w->out, key);
        fputs(": ", w->out);
    }
    return 1;
}

static void begin_container(nsp_json_writer_t *w, const char *key, int inline_, char open,
                            char close)
{
    if (w->status == NSP_OK && w->depth >= NSP_JSON_MAX_DEPTH) {
        w->status = nsp_error(NSP_ERR_INTERNAL, "JSON writer: nesting deeper than %d",
                              NSP_JSON_MAX_DEPTH);
    }
    if (!begin_value(w, key)) {
        return;
    }
    fputc(open, w->out);
    ++w->depth;
    w->closer[w->depth] = close;
    w->entries[w->depth] = 0;
    if (inline_ && w->inline_from == 0) {
        w->inline_from = w->depth;
    }
}

void nsp_json_begin_object(nsp_json_writer_t *w, const char *key, int inline_)
{
    begin_container(w, key, inline_, '{', '}');
}

void nsp_json_begin_array(nsp_json_writer_t *w, const char *key, int inline_)
{
    begin_container(w, key, inline_, '[', ']');
}

void nsp_json_end(nsp_json_writer_t *w)
{
    if (w->status != NSP_OK) {
        return;
    }
    if (w->depth == 0) {
        w->status = nsp_error(NSP_ERR_INTERNAL, "JSON writer: end without an open container");
        return;
    }
    if (w->inline_from == 0 && w->entries[w->depth] > 0) {
        fprintf(w->out, "\n%*s", w->indent * (w->depth - 1), "");
    }
    fputc(w->closer[w->depth], w->out);
    if (w->inline_from == w->depth) {
        w->inline_from = 0;
    }
    --w->depth;
}

/* The shortest of %.15g, %.16g, %.17g that reads back to the same double
 * (%.17g always does), with '.' as the decimal point whatever the locale. */
static void format_double(char *buf, size_t len, double value)
{
    const char *dp = localeconv()->decimal_point;

    for (int digits = 15; digits <= 17; ++digits) {
        int ok;
        snprintf(buf, len, "%.*g", digits, value);
        if (dp != NULL && dp[0] != '\0' && strcmp(dp, ".") != 0) {
            char *at = strstr(buf, dp);
            if (at != NULL) {
                size_t dplen = strlen(dp);
                *at = '.';
                memmove(at + 1, at + dplen, strlen(at + dplen) + 1);
            }
        }
        if (strtod_c_locale(buf, strlen(buf), &ok) == value && ok) {
            return;
        }
    }
}

void nsp_json_double(nsp_json_writer_t *w, const char *key, double value)
{
    char buf[64];

    if (w->status == NSP_OK && !isfinite(value)) {
        w->status = nsp_error(NSP_ERR_INVALID_ARG, "cannot write %g for key \"%s\": JSON "
                              "holds only finite numbers", value, key ? key : "(array element)");
        return;
    }
    if (!begin_value(w, key)) {
        return;
    }
    format_double(buf, sizeof(buf), value);
    fputs(buf, w->out);
}

void nsp_json_int(nsp_json_writer_t *w, const char *key, int64_t value)
{
    if (begin_value(w, key)) {
        fprintf(w->out, "%lld", (long long)value);
    }
}

void nsp_json_bool(nsp_json_writer_t *w, const char *key, int value)
{
    if (begin_value(w, key)) {
        fputs(value ? "true" : "false", w->out);
    }
}

void nsp_json_null(nsp_json_writer_t *w, const char *key)
{
    if (begin_value(w, key)) {
        fputs("null", w->out);
    }
}

void nsp_json_string(nsp_json_writer_t *w, const char *key, const char *value)
{
    if (begin_value(w, key)) {
        write_escaped(w->out, value != NULL ? value : "");
    }
}

nsp_status_t nsp_json_writer_finish(nsp_json_writer_t *w)
{
    if (w->status != NSP_OK) {
        return w->status;
    }
    if (w->depth != 0) {
        return nsp_error(NSP_ERR_INTERNAL, "JSON writer: %d containers left open", w->depth);
    }
    if (fflush(w->out) != 0 || ferror(w->out)) {
        return nsp_error(NSP_ERR_IO, "cannot write JSON: %s", strerror(errno));
    }
    return NSP_OK;
}
