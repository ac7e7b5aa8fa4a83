/*
 * A small JSON reader (DOM) and writer for nspcomm's own files: model and
 * cluster descriptions, plans (nspcomm-plan-v1) and simulator output.
 *
 * Reader: nsp_json_parse() builds a tree of nsp_json_t values; every value
 * remembers the line it starts on and the name of its source, so a caller can
 * report "file:line: key ..." for a value of the wrong type or range. Malformed
 * input gives NSP_ERR_PARSE with file and line (never a crash: nesting depth is
 * limited, every read is bounds-checked). Numbers are kept as double and, where
 * the value is an integer that fits, exactly as int64_t.
 *
 * Writer: nsp_json_writer_t prints values one by one with commas and
 * indentation handled for the caller; containers can be "inline" (one line,
 * as the groups of a plan). Doubles are printed with up to 17 significant
 * digits (%.17g, or %.15g/%.16g when those already read back to the same
 * double), so they read back bit for bit; the output does not depend on the
 * C locale.
 */
#ifndef NSP_COMMON_JSON_H_
#define NSP_COMMON_JSON_H_

#include "nspcomm.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/** Deepest nesting of arrays/objects the reader and writer accept. */
#define NSP_JSON_MAX_DEPTH 128

typedef enum nsp_json_type {
    NSP_JSON_NULL = 0,
    NSP_JSON_BOOL,
    NSP_JSON_NUMBER,
    NSP_JSON_STRING,
    NSP_JSON_ARRAY,
    NSP_JSON_OBJECT
} nsp_json_type_t;

/** One JSON value. Owned by the tree of nsp_json_parse(); read-only. */
typedef struct nsp_json nsp_json_t;
struct nsp_json {
    nsp_json_type_t type;
    int             line;     /**< 1-based line where the value starts */
    const char     *source;   /**< file name for messages (owned by the root) */
    int             boolean;  /**< NSP_JSON_BOOL: 0 or 1 */
    double          number;   /**< NSP_JSON_NUMBER: the value */
    int             is_int;   /**< NSP_JSON_NUMBER: 1 if `integer` holds it exactly */
    int64_t         integer;  /**< NSP_JSON_NUMBER: exact value when is_int */
    char           *string;   /**< NSP_JSON_STRING: UTF-8, NUL-terminated */
    size_t          count;    /**< ARRAY/OBJECT: number of entries */
    nsp_json_t     *items;    /**< ARRAY/OBJECT: [count] values */
    char          **keys;     /**< OBJECT: [count] keys (unique) */
};

/**
 * Parse `len` bytes of `text` (need not be NUL-terminated) into a tree.
 * `source` names the text in messages (a path, or e.g. "<plan>"); it is
 * copied. On success *root is owned by the caller (nsp_json_free).
 * Errors: NSP_ERR_PARSE ("source:line: what, in key K"), NSP_ERR_NO_MEMORY,
 * NSP_ERR_INVALID_ARG (NULL).
 */
nsp_status_t nsp_json_parse(const char *text, size_t len, const char *source,
                            nsp_json_t **root);

/**
 * Read a whole file and parse it. Errors: NSP_ERR_IO (cannot open or read:
 * names the path and the system's reason), as nsp_json_parse otherwise.
 */
nsp_status_t nsp_json_parse_file(const char *path, nsp_json_t **root);

/** Free a tree returned by nsp_json_parse*. NULL is a no-op. */
void nsp_json_free(nsp_json_t *root);

/** Member `key` of an object, or NULL if absent (or `obj` is not an object). */
const nsp_json_t *nsp_json_get(const nsp_json_t *obj, const char *key);

/** "a number", "an object", ...: for messages. */
const char *nsp_json_type_name(nsp_json_type_t type);

/*
 * Typed access with messages that name source, line and `what` (the key or
 * a path such as "rounds[2].groups[0].size"). Each returns NSP_ERR_PARSE if
 * the value has the wrong type (or is not an integer / not in int range).
 */
nsp_status_t nsp_json_as_double(const nsp_json_t *v, const char *what, double *out);
nsp_status_t nsp_json_as_int64(const nsp_json_t *v, const char *what, int64_t *out);
nsp_status_t nsp_json_as_int(const nsp_json_t *v, const char *what, int *out);
nsp_status_t nsp_json_as_bool(const nsp_json_t *v, const char *what, int *out);
nsp_status_t nsp_json_as_string(const nsp_json_t *v, const char *what, const char **out);
/** Check the type of a container (or any value). */
nsp_status_t nsp_json_expect(const nsp_json_t *v, nsp_json_type_t type, const char *what);
/** Member `key` of object `obj`, required: NSP_ERR_PARSE naming the object's
 *  source and line if it is absent. `what` names the object in the message. */
nsp_status_t nsp_json_require(const nsp_json_t *obj, const char *key, const char *what,
                              const nsp_json_t **out);

/* ------------------------------------------------------------------------ */
/* Writer                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct nsp_json_writer {
    FILE        *out;                          /**< borrowed */
    int          depth;                        /**< open containers */
    int          indent;                       /**< spaces per level */
    int          inline_from;                  /**< depth of the outermost inline
                                                    container, or 0 */
    char         closer[NSP_JSON_MAX_DEPTH + 1];   /**< ']' or '}' per depth */
    int          entries[NSP_JSON_MAX_DEPTH + 1];  /**< values written per depth */
    nsp_status_t status;                       /**< first error, sticky */
} nsp_json_writer_t;

/** Start writing to `out` (borrowed) with `indent` spaces per level. */
void nsp_json_writer_init(nsp_json_writer_t *w, FILE *out, int indent);

/*
 * Each call writes one value. `key` is the member name inside an object and
 * must be NULL inside an array or at the top. Containers opened with
 * `inline_` = 1 print on one line, and so does everything inside them.
 * Errors are sticky and reported by nsp_json_writer_finish().
 */
void nsp_json_begin_object(nsp_json_writer_t *w, const char *key, int inline_);
void nsp_json_begin_array(nsp_json_writer_t *w, const char *key, int inline_);
void nsp_json_end(nsp_json_writer_t *w);
/** A finite double that reads back bit for bit (see above); a non-finite one is an
 *  error (JSON cannot hold it): NSP_ERR_INVALID_ARG naming the key. */
void nsp_json_double(nsp_json_writer_t *w, const char *key, double value);
void nsp_json_int(nsp_json_writer_t *w, const char *key, int64_t value);
void nsp_json_bool(nsp_json_writer_t *w, const char *key, int value);
void nsp_json_null(nsp_json_writer_t *w, const char *key);
/** A string, escaped ("\"", "\\", control characters as \u00XX). */
void nsp_json_string(nsp_json_writer_t *w, const char *key, const char *value);

/**
 * Check the writer: every container closed, no error, the stream without
 * error. Does not write a final newline. Errors: NSP_ERR_INVALID_ARG (a
 * non-finite number), NSP_ERR_INTERNAL (misuse: unbalanced containers, a
 * key missing in an object or given in an array), NSP_ERR_IO (write failed).
 */
nsp_status_t nsp_json_writer_finish(nsp_json_writer_t *w);

#endif /* NSP_COMMON_JSON_H_ */
