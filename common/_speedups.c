/*
 * common._speedups: the compiled core of the remoting codec's hot paths.
 *
 * Each function here has a pure-Python twin that stays the reference (cluster/remoting/codec.py,
 * storage/message.py); common/speedups.py decides which one runs. The contract, checked by
 * tests/unit/remoting/test_speedups.py with hypothesis:
 *
 *   - every result is exactly what the pure function computes, value for value and byte for byte;
 *   - the decoders and encoders return None for anything they do not reproduce exactly (floats,
 *     nested values, ints beyond int64, invalid UTF-8, malformed input of any kind): the caller
 *     then runs the pure function, which either handles the input or raises its precise error.
 *
 * The decoders read bytes a peer sent: every read is bounds-checked against the buffer's end,
 * nothing recurses, and every object made on a failing path is released. Plain C99 and the
 * CPython C API only.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_header_fields.h"
#include "_text.h"

#define LANGUAGE_COUNT 14
static const char *const LANGUAGE_NAMES[LANGUAGE_COUNT] = {
    "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP",
    "OMS", "RUST", "NODE_JS",
};
#define LANGUAGE_OTHER 7

/* Immortal for the life of the process (the module cannot be unloaded): interned strings. */
static PyObject *language_names[LANGUAGE_COUNT];
static PyObject *str_true;
static PyObject *str_false;

static PyObject *
language_name(long long value)
{
    PyObject *name = language_names[(value >= 0 && value < LANGUAGE_COUNT) ? value : LANGUAGE_OTHER];
    Py_INCREF(name);
    return name;
}

/* ------------------------------------------------------------------------------------------ */
/* UTF-8                                                                                       */

/* Length of the well-formed UTF-8 sequence at p (lead byte >= 0x80), or 0 when it is not one:
 * exactly what Python's strict "utf-8" codec accepts (no overlongs, no surrogates, nothing past
 * U+10FFFF). */
static Py_ssize_t
utf8_sequence(const unsigned char *p, const unsigned char *end)
{
    Py_ssize_t avail = end - p;
    unsigned char c = p[0];
    if (c >= 0xC2 && c <= 0xDF) {
        if (avail < 2 || (p[1] & 0xC0) != 0x80)
            return 0;
        return 2;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        unsigned char lo = 0x80, hi = 0xBF;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
        if (avail < 3 || p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80)
            return 0;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        unsigned char lo = 0x80, hi = 0xBF;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
        if (avail < 4 || p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80)
            return 0;
        return 4;
    }
    return 0;
}

/* The code point of a sequence utf8_sequence() accepted. */
static Py_UCS4
utf8_decode(const unsigned char *p, Py_ssize_t n)
{
    switch (n) {
    case 2:
        return ((Py_UCS4)(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    case 3:
        return ((Py_UCS4)(p[0] & 0x0F) << 12) | ((Py_UCS4)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    default:
        return ((Py_UCS4)(p[0] & 0x07) << 18) | ((Py_UCS4)(p[1] & 0x3F) << 12)
               | ((Py_UCS4)(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    }
}

#define IS_SURROGATE(c) ((c) >= 0xD800 && (c) <= 0xDFFF)


/* ------------------------------------------------------------------------------------------ */
/* JSON decoding                                                                               */

typedef struct {
    const unsigned char *start; /* the text between the quotes */
    const unsigned char *stop;
    int escaped;                /* holds a backslash escape */
    int ascii;                  /* every byte < 0x80 */
} Span;

static int
hex_digit(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Four hex digits at p (the caller checked that they are in the buffer), or -1. */
static long
hex4(const unsigned char *p)
{
    long value = 0;
    for (int i = 0; i < 4; i++) {
        int d = hex_digit(p[i]);
        if (d < 0)
            return -1;
        value = (value << 4) | d;
    }
    return value;
}

static const unsigned char *
skip_ws(const unsigned char *p, const unsigned char *end)
{
    /* JSON's whitespace, exactly the json module's: no other character is skipped. */
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* p is at an opening quote (p < end). Checks the string as json.loads(strict=True) would: every
 * escape complete and known, no raw control character, strict UTF-8 (stricter than json.loads
 * on bytes, which lets encoded surrogates through: those strings are left to the pure path).
 * Returns the position after the closing quote, or NULL. */
static const unsigned char *
scan_string(const unsigned char *p, const unsigned char *end, Span *span)
{
    p++;
    span->start = p;
    span->escaped = 0;
    span->ascii = 1;
    while (p < end) {
        unsigned char c = *p;
        if (c == '"') {
            span->stop = p;
            return p + 1;
        }
        if (c == '\\') {
            span->escaped = 1;
            if (end - p < 2)
                return NULL;
            switch (p[1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                p += 2;
                break;
            case 'u':
                if (end - p < 6 || hex4(p + 2) < 0)
                    return NULL;
                p += 6;
                break;
            default:
                return NULL;
            }
            continue;
        }
        if (c < 0x20)
            return NULL;
        if (c < 0x80) {
            p++;
            continue;
        }
        Py_ssize_t n = utf8_sequence(p, end);
        if (n == 0)
            return NULL;
        span->ascii = 0;
        p += n;
    }
    return NULL;
}

/* The str of a span scan_string() accepted. A lone UTF-16 surrogate (an escape such as \ud800
 * with no low half after it) becomes '?' when replace_lone is set, as codec._java_text does;
 * otherwise it is kept and *lone is set. */
static PyObject *
span_str(const Span *span, int replace_lone, int *lone)
{
    Py_ssize_t size = span->stop - span->start;
    if (!span->escaped) {
        if (span->ascii) {
            if (size == 1) /* CPython keeps these: no allocation for "a" or "0" */
                return PyUnicode_FromOrdinal(span->start[0]);
            PyObject *s = PyUnicode_New(size, 127);
            if (s != NULL)
                memcpy(PyUnicode_1BYTE_DATA(s), span->start, (size_t)size);
            return s;
        }
        return PyUnicode_DecodeUTF8((const char *)span->start, size, "strict");
    }
    /* Never more code points than bytes. */
    Py_UCS4 stack[256];
    Py_UCS4 *buffer = stack;
    if (size > (Py_ssize_t)(sizeof(stack) / sizeof(stack[0]))) {
        buffer = PyMem_New(Py_UCS4, (size_t)size);
        if (buffer == NULL)
            return PyErr_NoMemory();
    }
    const unsigned char *p = span->start, *stop = span->stop;
    Py_ssize_t n = 0;
    while (p < stop && n < size) {
        unsigned char c = *p;
        Py_UCS4 cp;
        if (c == '\\' && stop - p >= 2) {
            switch (p[1]) {
            case 'b': cp = '\b'; p += 2; break;
            case 'f': cp = '\f'; p += 2; break;
            case 'n': cp = '\n'; p += 2; break;
            case 'r': cp = '\r'; p += 2; break;
            case 't': cp = '\t'; p += 2; break;
            case 'u': {
                long value = stop - p >= 6 ? hex4(p + 2) : -1;
                if (value < 0)
                    goto broken;
                p += 6;
                cp = (Py_UCS4)value;
                /* A high surrogate followed by an escaped low one is one character (json's
                 * scanstring); anything else leaves the surrogate alone. */
                if (cp >= 0xD800 && cp <= 0xDBFF && stop - p >= 6 && p[0] == '\\' && p[1] == 'u') {
                    long low = hex4(p + 2);
                    if (low >= 0xDC00 && low <= 0xDFFF) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + ((Py_UCS4)low - 0xDC00);
                        p += 6;
                    }
                }
                if (IS_SURROGATE(cp)) {
                    *lone = 1;
                    if (replace_lone)
                        cp = '?';
                }
                break;
            }
            default: /* '"', '\\', '/' */
                cp = p[1];
                p += 2;
                break;
            }
        }
        else if (c < 0x80) {
            cp = c;
            p++;
        }
        else {
            Py_ssize_t len = utf8_sequence(p, stop);
            if (len == 0)
                goto broken;
            cp = utf8_decode(p, len);
            p += len;
        }
        buffer[n++] = cp;
    }
    if (p != stop)
        goto broken;
    PyObject *s = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, buffer, n);
    if (buffer != stack)
        PyMem_Free(buffer);
    return s;
broken: /* unreachable for a span scan_string() accepted; kept so that no path reads past it */
    if (buffer != stack)
        PyMem_Free(buffer);
    PyErr_SetString(PyExc_SystemError, "_speedups: string span changed under the decoder");
    return NULL;
}

/* Does the (decoded) text of a key equal `name` (ASCII)? */
static int
span_equals(const Span *span, const char *name, Py_ssize_t length)
{
    if (!span->escaped)
        return span->stop - span->start == length && memcmp(span->start, name, (size_t)length) == 0;
    int lone = 0;
    PyObject *s = span_str(span, 0, &lone);
    if (s == NULL)
        return -1;
    int equal = PyUnicode_CompareWithASCIIString(s, name) == 0;
    Py_DECREF(s);
    return equal;
}

enum { NUM_OK = 0, NUM_NONE = 1 };

/* An integer token at p as the json module reads it: -?(0|[1-9][0-9]*) not followed by a
 * fraction or an exponent. At most 18 digits, so it fits int64; anything else (a float, a
 * longer int, not a number) is NUM_NONE. */
static int
parse_int(const unsigned char **pp, const unsigned char *end, long long *out)
{
    const unsigned char *p = *pp;
    int negative = 0;
    if (p < end && *p == '-') {
        negative = 1;
        p++;
    }
    if (p >= end || *p < '0' || *p > '9')
        return NUM_NONE;
    long long value = 0;
    if (*p == '0') {
        p++;
    }
    else {
        const unsigned char *first = p;
        while (p < end && *p >= '0' && *p <= '9') {
            if (p - first >= 18)
                return NUM_NONE;
            value = value * 10 + (*p - '0');
            p++;
        }
    }
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E'))
        return NUM_NONE;
    *out = negative ? -value : value;
    *pp = p;
    return NUM_OK;
}

enum { LIT_NONE = 0, LIT_TRUE, LIT_FALSE, LIT_NULL };

static int
parse_literal(const unsigned char **pp, const unsigned char *end)
{
    const unsigned char *p = *pp;
    Py_ssize_t avail = end - p;
    if (avail >= 4 && memcmp(p, "true", 4) == 0) {
        *pp = p + 4;
        return LIT_TRUE;
    }
    if (avail >= 5 && memcmp(p, "false", 5) == 0) {
        *pp = p + 5;
        return LIT_FALSE;
    }
    if (avail >= 4 && memcmp(p, "null", 4) == 0) {
        *pp = p + 4;
        return LIT_NULL;
    }
    return LIT_NONE;
}

/* A copy of `s` with each surrogate code point replaced by '?' (codec._java_text). */
static PyObject *
java_text(PyObject *s)
{
    if (str_ready(s) < 0)
        return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    Py_UCS4 *buffer = PyMem_New(Py_UCS4, (size_t)(n ? n : 1));
    if (buffer == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        buffer[i] = IS_SURROGATE(c) ? '?' : c;
    }
    PyObject *out = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, buffer, n);
    PyMem_Free(buffer);
    return out;
}

/* extFields' object, p at '{'. Values as codec._ext_value makes them; keys through _java_text.
 * Returns a new dict (*pp moved past '}'), NULL with an exception set, or NULL with none set
 * when the pure path must decide. */
static PyObject *
parse_ext_fields(const unsigned char **pp, const unsigned char *end)
{
    const unsigned char *p = *pp + 1;
    int saw_null = 0, lone_key = 0;
    PyObject *fields = PyDict_New();
    if (fields == NULL)
        return NULL;
    p = skip_ws(p, end);
    if (p < end && *p == '}') {
        *pp = p + 1;
        return fields;
    }
    for (;;) {
        Span span;
        if (p >= end || *p != '"')
            goto fail;
        p = scan_string(p, end, &span);
        if (p == NULL)
            goto fail;
        PyObject *key = span_str(&span, 0, &lone_key);
        if (key == NULL)
            goto fail;
        p = skip_ws(p, end);
        if (p >= end || *p != ':') {
            Py_DECREF(key);
            goto fail;
        }
        p = skip_ws(p + 1, end);
        PyObject *value = NULL;
        if (p < end && *p == '"') {
            Span text;
            int lone = 0;
            p = scan_string(p, end, &text);
            if (p == NULL) {
                Py_DECREF(key);
                goto fail;
            }
            value = span_str(&text, 1, &lone);
            if (value == NULL) {
                Py_DECREF(key);
                goto fail;
            }
        }
        else if (p < end && (*p == '-' || (*p >= '0' && *p <= '9'))) {
            /* str(int): the token itself, which JSON already writes canonically, but "-0". */
            const unsigned char *first = p;
            long long number;
            if (parse_int(&p, end, &number) != NUM_OK) {
                Py_DECREF(key);
                goto fail;
            }
            if (number == 0)
                value = PyUnicode_FromStringAndSize("0", 1);
            else
                value = PyUnicode_FromStringAndSize((const char *)first, p - first);
            if (value == NULL) {
                Py_DECREF(key);
                goto fail;
            }
        }
        else {
            switch (parse_literal(&p, end)) {
            case LIT_TRUE:
                value = str_true;
                break;
            case LIT_FALSE:
                value = str_false;
                break;
            case LIT_NULL:
                value = Py_None; /* dropped below, once the last duplicate is known */
                saw_null = 1;
                break;
            default:
                Py_DECREF(key);
                goto fail;
            }
            Py_INCREF(value);
        }
        int failed = PyDict_SetItem(fields, key, value); /* a later duplicate wins, as json's */
        Py_DECREF(key);
        Py_DECREF(value);
        if (failed)
            goto fail;
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == '}') {
            p++;
            break;
        }
        goto fail;
    }
    if (saw_null || lone_key) {
        /* codec: for key, value in ext.items(): drop None, key through _java_text (two keys
         * may become one: the later wins, at the earlier's place). */
        PyObject *mended = PyDict_New();
        if (mended == NULL)
            goto fail;
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(fields, &pos, &key, &value)) {
            if (value == Py_None)
                continue;
            PyObject *text = lone_key ? java_text(key) : (Py_INCREF(key), key);
            if (text == NULL) {
                Py_DECREF(mended);
                goto fail;
            }
            int failed = PyDict_SetItem(mended, text, value);
            Py_DECREF(text);
            if (failed) {
                Py_DECREF(mended);
                goto fail;
            }
        }
        Py_SETREF(fields, mended);
    }
    *pp = p;
    return fields;
fail: /* the caller tells an error (an exception set) from "not for us" (none) */
    Py_DECREF(fields);
    return NULL;
}

enum {
    KEY_OTHER, KEY_CODE, KEY_OPAQUE, KEY_FLAG, KEY_VERSION, KEY_LANGUAGE, KEY_REMARK, KEY_EXT,
};

static int
identify_key(const Span *span)
{
    static const struct { const char *name; Py_ssize_t length; int key; } known[] = {
        {"code", 4, KEY_CODE}, {"opaque", 6, KEY_OPAQUE}, {"flag", 4, KEY_FLAG},
        {"version", 7, KEY_VERSION}, {"language", 8, KEY_LANGUAGE}, {"remark", 6, KEY_REMARK},
        {"extFields", 9, KEY_EXT},
    };
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        int equal = span_equals(span, known[i].name, known[i].length);
        if (equal != 0)
            return equal < 0 ? -1 : known[i].key;
    }
    return KEY_OTHER;
}

/* A value of a key the pure path ignores: a string, an int, true, false or null; else 0. */
static int
skip_scalar(const unsigned char **pp, const unsigned char *end)
{
    const unsigned char *p = *pp;
    if (p >= end)
        return 0;
    if (*p == '"') {
        Span span;
        p = scan_string(p, end, &span);
        if (p == NULL)
            return 0;
    }
    else if (*p == '-' || (*p >= '0' && *p <= '9')) {
        long long ignored;
        if (parse_int(&p, end, &ignored) != NUM_OK)
            return 0;
    }
    else if (parse_literal(&p, end) == LIT_NONE) {
        return 0;
    }
    *pp = p;
    return 1;
}

PyDoc_STRVAR(decode_json_header_doc,
"decode_json_header(header: bytes) -> tuple | None\n\n"
"(code, opaque, flag, remark, ext_fields, language, version) as codec._decode_json_header\n"
"reads them, or None when the pure path must decide.");

static PyObject *json_header_at(const unsigned char *p, const unsigned char *end);

static PyObject *
decode_json_header(PyObject *module, PyObject *arg)
{
    (void)module;
    if (!PyBytes_Check(arg))
        Py_RETURN_NONE;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(arg);
    return json_header_at(p, p + PyBytes_GET_SIZE(arg));
}

/* decode_json_header's work on the header's bytes wherever they are (a frame in a buffer). */
static PyObject *
json_header_at(const unsigned char *p, const unsigned char *end)
{
    long long code = 0, opaque = 0, flag = 0, version = 0;
    PyObject *remark = NULL, *ext = NULL, *language = NULL;

    p = skip_ws(p, end);
    if (p >= end || *p != '{')
        goto none;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') {
        p++;
        goto done;
    }
    for (;;) {
        Span span;
        if (p >= end || *p != '"')
            goto none;
        p = scan_string(p, end, &span);
        if (p == NULL)
            goto none;
        int key = identify_key(&span);
        if (key < 0)
            goto error;
        p = skip_ws(p, end);
        if (p >= end || *p != ':')
            goto none;
        p = skip_ws(p + 1, end);
        if (p >= end)
            goto none;
        switch (key) {
        case KEY_CODE: case KEY_OPAQUE: case KEY_FLAG: case KEY_VERSION: {
            long long number;
            /* codec._int_field: int32 only (strings and floats that int() takes: pure path) */
            if (parse_int(&p, end, &number) != NUM_OK || number < INT32_MIN || number > INT32_MAX)
                goto none;
            if (key == KEY_CODE)
                code = number;
            else if (key == KEY_OPAQUE)
                opaque = number;
            else if (key == KEY_FLAG)
                flag = number;
            else
                version = number;
            break;
        }
        case KEY_LANGUAGE: {
            PyObject *value;
            if (*p == '"') {
                Span text;
                int lone = 0;
                p = scan_string(p, end, &text);
                if (p == NULL)
                    goto none;
                value = span_str(&text, 1, &lone);
                if (value == NULL)
                    goto error;
            }
            else if (*p == '-' || (*p >= '0' && *p <= '9')) {
                long long number;
                if (parse_int(&p, end, &number) != NUM_OK)
                    goto none;
                value = language_name(number); /* LanguageCode(n).name, "OTHER" if none */
            }
            else if (parse_literal(&p, end) != LIT_NONE) {
                value = language_name(LANGUAGE_OTHER); /* neither str nor int: "OTHER" */
            }
            else {
                goto none;
            }
            Py_XSETREF(language, value);
            break;
        }
        case KEY_REMARK: {
            PyObject *value;
            if (*p == '"') {
                Span text;
                int lone = 0;
                p = scan_string(p, end, &text);
                if (p == NULL)
                    goto none;
                value = span_str(&text, 1, &lone);
                if (value == NULL)
                    goto error;
            }
            else if (skip_scalar(&p, end)) {
                value = Py_None; /* not a str: None */
                Py_INCREF(value);
            }
            else {
                goto none;
            }
            Py_XSETREF(remark, value);
            break;
        }
        case KEY_EXT: {
            PyObject *value;
            if (*p == '{') {
                value = parse_ext_fields(&p, end);
                if (value == NULL) {
                    if (PyErr_Occurred())
                        goto error;
                    goto none;
                }
            }
            else if (parse_literal(&p, end) == LIT_NULL) {
                value = PyDict_New(); /* `data.get("extFields") or {}` */
                if (value == NULL)
                    goto error;
            }
            else {
                goto none;
            }
            Py_XSETREF(ext, value);
            break;
        }
        default:
            if (!skip_scalar(&p, end))
                goto none;
        }
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == '}') {
            p++;
            break;
        }
        goto none;
    }
done:
    if (skip_ws(p, end) != end)
        goto none;
    if (remark == NULL) {
        remark = Py_None;
        Py_INCREF(remark);
    }
    if (ext == NULL && (ext = PyDict_New()) == NULL)
        goto error;
    if (language == NULL)
        language = language_name(0); /* "JAVA" */
    PyObject *result = PyTuple_New(7);
    if (result == NULL)
        goto error;
    PyObject *numbers[4] = {
        PyLong_FromLongLong(code), PyLong_FromLongLong(opaque), PyLong_FromLongLong(flag),
        PyLong_FromLongLong(version),
    };
    if (!numbers[0] || !numbers[1] || !numbers[2] || !numbers[3]) {
        for (int i = 0; i < 4; i++)
            Py_XDECREF(numbers[i]);
        Py_DECREF(result);
        goto error;
    }
    PyTuple_SET_ITEM(result, 0, numbers[0]);
    PyTuple_SET_ITEM(result, 1, numbers[1]);
    PyTuple_SET_ITEM(result, 2, numbers[2]);
    PyTuple_SET_ITEM(result, 3, remark);
    PyTuple_SET_ITEM(result, 4, ext);
    PyTuple_SET_ITEM(result, 5, language);
    PyTuple_SET_ITEM(result, 6, numbers[3]);
    return result;
none:
    Py_XDECREF(remark);
    Py_XDECREF(ext);
    Py_XDECREF(language);
    Py_RETURN_NONE;
error:
    Py_XDECREF(remark);
    Py_XDECREF(ext);
    Py_XDECREF(language);
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* ROCKETMQ binary header decoding                                                             */

static int32_t
read_i32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static int16_t
read_i16(const unsigned char *p)
{
    return (int16_t)(((uint16_t)p[0] << 8) | p[1]);
}

PyDoc_STRVAR(decode_binary_header_doc,
"decode_binary_header(header: bytes) -> tuple | None\n\n"
"(code, opaque, flag, remark, ext_fields, language, version) of a ROCKETMQ header as\n"
"codec._decode_binary_header reads them, or None when that raises.");

static PyObject *binary_header_at(const unsigned char *buffer, Py_ssize_t size);

static PyObject *
decode_binary_header(PyObject *module, PyObject *arg)
{
    (void)module;
    if (!PyBytes_Check(arg))
        Py_RETURN_NONE;
    return binary_header_at((const unsigned char *)PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg));
}

/* decode_binary_header's work on the header's bytes wherever they are. */
static PyObject *
binary_header_at(const unsigned char *buffer, Py_ssize_t size)
{
    PyObject *remark = NULL, *fields = NULL;
    if (size < 17) /* the fixed part and the remark length */
        Py_RETURN_NONE;
    int code = read_i16(buffer);
    int language = buffer[2];
    int version = read_i16(buffer + 3);
    int32_t opaque = read_i32(buffer + 5);
    int32_t flag = read_i32(buffer + 9);
    Py_ssize_t pos = 13;
    int32_t remark_length = read_i32(buffer + pos);
    pos += 4;
    if (remark_length < 0 || remark_length > size - pos)
        goto none;
    if (remark_length > 0) {
        remark = decode_text(buffer + pos, remark_length);
        if (remark == NULL)
            goto fail;
    }
    else {
        remark = Py_None;
        Py_INCREF(remark);
    }
    pos += remark_length;
    if (size - pos < 4)
        goto none;
    int32_t ext_length = read_i32(buffer + pos);
    pos += 4;
    if (ext_length < 0 || ext_length > size - pos)
        goto none;
    Py_ssize_t end = pos + ext_length;
    fields = PyDict_New();
    if (fields == NULL)
        goto fail;
    while (pos < end) {
        /* Every part of an entry must lie inside extFields: the pure path raises otherwise. */
        if (end - pos < 2)
            goto none;
        int key_length = read_i16(buffer + pos);
        pos += 2;
        if (key_length < 0 || key_length > end - pos)
            goto none;
        PyObject *key = decode_text(buffer + pos, key_length);
        if (key == NULL)
            goto fail;
        pos += key_length;
        if (end - pos < 4) {
            Py_DECREF(key);
            goto none;
        }
        int32_t value_length = read_i32(buffer + pos);
        pos += 4;
        if (value_length < 0 || value_length > end - pos) {
            Py_DECREF(key);
            goto none;
        }
        PyObject *value = decode_text(buffer + pos, value_length);
        if (value == NULL) {
            Py_DECREF(key);
            goto fail;
        }
        pos += value_length;
        int failed = PyDict_SetItem(fields, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (failed)
            goto fail;
    }
    PyObject *numbers[4] = {
        PyLong_FromLong(code), PyLong_FromLong(opaque), PyLong_FromLong(flag), PyLong_FromLong(version),
    };
    PyObject *result = PyTuple_New(7);
    if (!result || !numbers[0] || !numbers[1] || !numbers[2] || !numbers[3]) {
        for (int i = 0; i < 4; i++)
            Py_XDECREF(numbers[i]);
        Py_XDECREF(result);
        goto fail;
    }
    PyTuple_SET_ITEM(result, 0, numbers[0]);
    PyTuple_SET_ITEM(result, 1, numbers[1]);
    PyTuple_SET_ITEM(result, 2, numbers[2]);
    PyTuple_SET_ITEM(result, 3, remark);
    PyTuple_SET_ITEM(result, 4, fields);
    PyTuple_SET_ITEM(result, 5, language_name(language));
    PyTuple_SET_ITEM(result, 6, numbers[3]);
    return result;
fail: /* an exception is set for a real error (memory); none set means "not UTF-8" */
    Py_XDECREF(remark);
    Py_XDECREF(fields);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
none:
    Py_XDECREF(remark);
    Py_XDECREF(fields);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------------------ */
/* Encoding                                                                                    */

/* What json.dumps adds to an ASCII character: 1 for \" \\ \b \f \n \r \t, 5 for the
 * other control characters (\u00XX), 0 for the rest. */
static const unsigned char JSON_EXTRA[128] = {
    5, 5, 5, 5, 5, 5, 5, 5, 1, 1, 1, 5, 1, 1, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

/* The bytes `s` takes as UTF-8 with each surrogate written as '?' (str.encode("utf-8",
 * "replace")), escaped for JSON (json.dumps(ensure_ascii=False)) when `json` is set, quotes
 * not counted. *surrogates counts the surrogates met. -1 on overflow. */
static Py_ssize_t
text_size(PyObject *s, int json, Py_ssize_t *surrogates)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s), size = 0;
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (PyUnicode_IS_ASCII(s)) {
        if (!json)
            return n;
        const Py_UCS1 *chars = (const Py_UCS1 *)data;
        if (n > PY_SSIZE_T_MAX / 6)
            return -1;
        size = n;
        for (Py_ssize_t i = 0; i < n; i++)
            size += JSON_EXTRA[chars[i]]; /* at most 6n */
        return size;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        Py_ssize_t w;
        if (c < 0x80)
            w = json ? 1 + JSON_EXTRA[c] : 1;
        else if (c < 0x800)
            w = 2;
        else if (IS_SURROGATE(c)) {
            w = 1;
            (*surrogates)++;
        }
        else if (c < 0x10000)
            w = 3;
        else
            w = 4;
        if (size > PY_SSIZE_T_MAX - w)
            return -1;
        size += w;
    }
    return size;
}

/* json.dumps' escape of an ASCII character with JSON_EXTRA[c] != 0. */
static char *
write_escape(char *w, Py_UCS4 c)
{
    static const char hex[] = "0123456789abcdef";
    *w++ = '\\';
    switch (c) {
    case '"': *w++ = '"'; break;
    case '\\': *w++ = '\\'; break;
    case '\b': *w++ = 'b'; break;
    case '\f': *w++ = 'f'; break;
    case '\n': *w++ = 'n'; break;
    case '\r': *w++ = 'r'; break;
    case '\t': *w++ = 't'; break;
    default:
        *w++ = 'u';
        *w++ = '0';
        *w++ = '0';
        *w++ = hex[(c >> 4) & 0xF];
        *w++ = hex[c & 0xF];
    }
    return w;
}

static char *
write_text(char *w, PyObject *s, int json)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (PyUnicode_IS_ASCII(s)) {
        const Py_UCS1 *chars = (const Py_UCS1 *)data;
        if (!json) {
            memcpy(w, chars, (size_t)n);
            return w + n;
        }
        Py_ssize_t run = 0; /* copy the runs between escapes at once */
        for (Py_ssize_t i = 0; i < n; i++) {
            if (JSON_EXTRA[chars[i]] == 0)
                continue;
            memcpy(w, chars + run, (size_t)(i - run));
            w += i - run;
            run = i + 1;
            w = write_escape(w, chars[i]);
        }
        memcpy(w, chars + run, (size_t)(n - run));
        return w + (n - run);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c < 0x80) {
            if (json && JSON_EXTRA[c])
                w = write_escape(w, c);
            else
                *w++ = (char)c;
        }
        else if (c < 0x800) {
            *w++ = (char)(0xC0 | (c >> 6));
            *w++ = (char)(0x80 | (c & 0x3F));
        }
        else if (IS_SURROGATE(c)) {
            *w++ = '?';
        }
        else if (c < 0x10000) {
            *w++ = (char)(0xE0 | (c >> 12));
            *w++ = (char)(0x80 | ((c >> 6) & 0x3F));
            *w++ = (char)(0x80 | (c & 0x3F));
        }
        else {
            *w++ = (char)(0xF0 | (c >> 18));
            *w++ = (char)(0x80 | ((c >> 12) & 0x3F));
            *w++ = (char)(0x80 | ((c >> 6) & 0x3F));
            *w++ = (char)(0x80 | (c & 0x3F));
        }
    }
    return w;
}

typedef struct {
    char digits[24];
    const char *text;  /* digits, or the UTF-8 of `big` */
    Py_ssize_t length;
    PyObject *big;     /* int.__repr__ of an int beyond int64 */
} Number;

/* An int as json.dumps writes it (int.__repr__, also for an int subclass such as IntEnum).
 * 1 when done, 0 when json would not write `value` as a number (a bool, not an int), -1 on
 * error. */
static int
number_init(Number *number, PyObject *value)
{
    number->big = NULL;
    number->text = number->digits;
    number->length = 0;
    if (!PyLong_Check(value) || PyBool_Check(value))
        return 0;
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (n == -1 && PyErr_Occurred())
        return -1;
    if (!overflow) {
        number->length = (Py_ssize_t)PyOS_snprintf(number->digits, sizeof(number->digits), "%lld", n);
        return number->length > 0 ? 1 : -1;
    }
    PyObject *text = PyLong_Type.tp_repr(value);
    if (text == NULL)
        return -1;
    number->big = text;
    number->text = PyUnicode_AsUTF8AndSize(text, &number->length);
    return number->text == NULL ? -1 : 1;
}

static char *
number_write(char *w, const Number *number)
{
    memcpy(w, number->text, (size_t)number->length);
    return w + number->length;
}

#define ADD_SIZE(total, amount) do {                                    \
        if ((amount) < 0 || (total) > PY_SSIZE_T_MAX - (amount))         \
            goto overflow;                                               \
        (total) += (amount);                                             \
    } while (0)

#define PUT_LITERAL(w, text) (memcpy((w), (text), sizeof(text) - 1), (w) + sizeof(text) - 1)

PyDoc_STRVAR(encode_json_header_doc,
"encode_json_header(code, ext_fields, flag, language, opaque, remark, version) -> bytes | None\n\n"
"codec._encode_json_header's bytes, or None for values it does not write itself (ext keys or\n"
"values that are not str, numbers that are not int, a remark neither str nor None).");

static PyObject *
encode_json_header(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "encode_json_header() takes 7 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *ext = args[1], *language = args[3], *remark = args[5];
    Number numbers[4]; /* code, flag, opaque, version */
    PyObject *sources[4] = {args[0], args[2], args[4], args[6]};
    int made = 0;
    PyObject *result = NULL;
    Py_ssize_t surrogates = 0, total = 0;

    if (!PyDict_CheckExact(ext) || !PyUnicode_CheckExact(language)
        || (remark != Py_None && !PyUnicode_CheckExact(remark)))
        Py_RETURN_NONE;
    for (; made < 4; made++) {
        int ok = number_init(&numbers[made], sources[made]);
        if (ok <= 0) {
            made++;
            if (ok < 0)
                goto error;
            goto none;
        }
    }
    if (str_ready(language) < 0 || (remark != Py_None && str_ready(remark) < 0))
        goto error;
    /* {"code":N,"extFields":{...},"flag":N,"language":"..","opaque":N,"remark":"..",
       "serializeTypeCurrentRPC":"JSON","version":N} */
    total = (Py_ssize_t)strlen("{\"code\":,\"flag\":,\"language\":\"\",\"opaque\":,"
                               "\"serializeTypeCurrentRPC\":\"JSON\",\"version\":}");
    for (int i = 0; i < 4; i++)
        ADD_SIZE(total, numbers[i].length);
    ADD_SIZE(total, text_size(language, 1, &surrogates));
    if (remark != Py_None) {
        ADD_SIZE(total, (Py_ssize_t)strlen(",\"remark\":\"\""));
        ADD_SIZE(total, text_size(remark, 1, &surrogates));
    }
    Py_ssize_t count = PyDict_GET_SIZE(ext);
    if (count > 0) {
        ADD_SIZE(total, (Py_ssize_t)strlen(",\"extFields\":{}"));
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(ext, &pos, &key, &value)) {
            if (!PyUnicode_CheckExact(key) || !PyUnicode_CheckExact(value))
                goto none;
            if (str_ready(key) < 0 || str_ready(value) < 0)
                goto error;
            ADD_SIZE(total, 6); /* "k":"v", */
            ADD_SIZE(total, text_size(key, 1, &surrogates));
            ADD_SIZE(total, text_size(value, 1, &surrogates));
        }
        total -= 1; /* no comma after the last pair */
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL)
        goto error;
    char *start = PyBytes_AS_STRING(result), *w = start;
    w = PUT_LITERAL(w, "{\"code\":");
    w = number_write(w, &numbers[0]);
    if (count > 0) {
        w = PUT_LITERAL(w, ",\"extFields\":{");
        Py_ssize_t pos = 0, written = 0;
        PyObject *key, *value;
        /* The dict cannot change in between: no Python code runs from the measuring on. */
        while (PyDict_Next(ext, &pos, &key, &value) && written < count) {
            if (written++)
                *w++ = ',';
            *w++ = '"';
            w = write_text(w, key, 1);
            w = PUT_LITERAL(w, "\":\"");
            w = write_text(w, value, 1);
            *w++ = '"';
        }
        *w++ = '}';
    }
    w = PUT_LITERAL(w, ",\"flag\":");
    w = number_write(w, &numbers[1]);
    w = PUT_LITERAL(w, ",\"language\":\"");
    w = write_text(w, language, 1);
    w = PUT_LITERAL(w, "\",\"opaque\":");
    w = number_write(w, &numbers[2]);
    if (remark != Py_None) {
        w = PUT_LITERAL(w, ",\"remark\":\"");
        w = write_text(w, remark, 1);
        *w++ = '"';
    }
    w = PUT_LITERAL(w, ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
    w = number_write(w, &numbers[3]);
    *w++ = '}';
    if (w - start != total) {
        Py_CLEAR(result);
        PyErr_SetString(PyExc_SystemError, "_speedups: JSON header size mismatch");
    }
    goto release;
overflow:
    PyErr_NoMemory();
error:
    Py_CLEAR(result);
    goto release;
none:
    Py_CLEAR(result);
    result = Py_None;
    Py_INCREF(result);
release:
    for (int i = 0; i < made; i++)
        Py_XDECREF(numbers[i].big);
    return result;
}

/* An int into [low, high]; 0 when it is not an int or out of range, -1 on error. */
static int
int_in_range(PyObject *value, long long low, long long high, long long *out)
{
    if (!PyLong_Check(value))
        return 0;
    int overflow = 0;
    long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (number == -1 && PyErr_Occurred())
        return -1;
    if (overflow || number < low || number > high)
        return 0;
    *out = number;
    return 1;
}

static char *
put_i32(char *w, int32_t value)
{
    uint32_t u = (uint32_t)value;
    w[0] = (char)(u >> 24);
    w[1] = (char)(u >> 16);
    w[2] = (char)(u >> 8);
    w[3] = (char)u;
    return w + 4;
}

static char *
put_i16(char *w, int value)
{
    uint16_t u = (uint16_t)value;
    w[0] = (char)(u >> 8);
    w[1] = (char)u;
    return w + 2;
}

PyDoc_STRVAR(encode_binary_header_doc,
"encode_binary_header(code, language_byte, version, opaque, flag, remark, ext_fields)\n"
"-> bytes | None\n\n"
"codec._encode_binary_header's bytes, or None where that raises (a code outside int16, text\n"
"that is not UTF-8, a value that is not str, a field that does not fit).");

static PyObject *
encode_binary_header(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "encode_binary_header() takes 7 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *remark = args[5], *ext = args[6];
    long long code, language, version, opaque, flag;
    int ok;
    if ((ok = int_in_range(args[0], -32768, 32767, &code)) <= 0
        || (ok = int_in_range(args[1], 0, 255, &language)) <= 0
        || (ok = int_in_range(args[3], INT32_MIN, INT32_MAX, &opaque)) <= 0
        || (ok = int_in_range(args[4], INT32_MIN, INT32_MAX, &flag)) <= 0)
        goto refuse;
    /* min(version, 32767): any larger int is clamped, a smaller one than int16's must fail */
    if (!PyLong_Check(args[2]))
        Py_RETURN_NONE;
    {
        int overflow = 0;
        version = PyLong_AsLongLongAndOverflow(args[2], &overflow);
        if (version == -1 && PyErr_Occurred())
            return NULL;
        if (overflow > 0 || version > 32767)
            version = 32767;
        else if (overflow < 0 || version < -32768)
            Py_RETURN_NONE;
    }
    if (remark != Py_None && !PyUnicode_CheckExact(remark))
        Py_RETURN_NONE;
    if (!PyDict_CheckExact(ext))
        Py_RETURN_NONE;

    Py_ssize_t surrogates = 0, remark_size = 0, ext_size = 0;
    if (remark != Py_None) {
        if (str_ready(remark) < 0)
            return NULL;
        remark_size = text_size(remark, 0, &surrogates);
        if (remark_size < 0 || remark_size > INT32_MAX)
            Py_RETURN_NONE;
    }
    Py_ssize_t count = PyDict_GET_SIZE(ext), pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(ext, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key) || !PyUnicode_CheckExact(value))
            Py_RETURN_NONE;
        if (str_ready(key) < 0 || str_ready(value) < 0)
            return NULL;
        Py_ssize_t k = text_size(key, 0, &surrogates), v = text_size(value, 0, &surrogates);
        if (k < 0 || k > 32767 || v < 0 || v > INT32_MAX)
            Py_RETURN_NONE;
        if (ext_size > INT32_MAX)
            Py_RETURN_NONE;
        ext_size += 6 + k + v; /* cannot overflow: each term is below 2^31 and so is the sum */
    }
    if (surrogates || ext_size > INT32_MAX) /* strict .encode() raises on a surrogate */
        Py_RETURN_NONE;
    Py_ssize_t total = 13 + 4 + remark_size + 4 + ext_size;
    PyObject *result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL)
        return NULL;
    char *start = PyBytes_AS_STRING(result), *w = start;
    w = put_i16(w, (int)code);
    *w++ = (char)language;
    w = put_i16(w, (int)version);
    w = put_i32(w, (int32_t)opaque);
    w = put_i32(w, (int32_t)flag);
    w = put_i32(w, (int32_t)remark_size);
    if (remark != Py_None)
        w = write_text(w, remark, 0);
    w = put_i32(w, (int32_t)ext_size);
    pos = 0;
    Py_ssize_t written = 0;
    while (PyDict_Next(ext, &pos, &key, &value) && written++ < count) {
        char *length_at = w;
        w = write_text(w + 2, key, 0);
        put_i16(length_at, (int)(w - length_at - 2));
        length_at = w;
        w = write_text(w + 4, value, 0);
        put_i32(length_at, (int32_t)(w - length_at - 4));
    }
    if (w - start != total) {
        Py_DECREF(result);
        PyErr_SetString(PyExc_SystemError, "_speedups: ROCKETMQ header size mismatch");
        return NULL;
    }
    return result;
refuse:
    if (ok < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------------------ */
/* Java String.hashCode                                                                        */

PyDoc_STRVAR(java_hash_unsigned_doc,
"java_hash_unsigned(text: str, seed: int = 0) -> int\n\n"
"Java's String.hashCode over the UTF-16 code units of `text`, continuing from `seed`, as an\n"
"unsigned 32-bit int (storage.message.java_hash_unsigned).");

static PyObject *
java_hash_unsigned(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)module;
    PyObject *text = NULL, *seed = NULL;
    if (nargs > 2) {
        PyErr_Format(PyExc_TypeError, "java_hash_unsigned() takes at most 2 arguments (%zd given)", nargs);
        return NULL;
    }
    if (nargs >= 1)
        text = args[0];
    if (nargs == 2)
        seed = args[1];
    Py_ssize_t keywords = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < keywords; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        PyObject **slot;
        if (PyUnicode_CompareWithASCIIString(name, "text") == 0)
            slot = &text;
        else if (PyUnicode_CompareWithASCIIString(name, "seed") == 0)
            slot = &seed;
        else {
            PyErr_Format(PyExc_TypeError, "java_hash_unsigned() got an unexpected keyword argument '%U'",
                         name);
            return NULL;
        }
        if (*slot != NULL) {
            PyErr_Format(PyExc_TypeError, "java_hash_unsigned() got multiple values for argument '%U'",
                         name);
            return NULL;
        }
        *slot = args[nargs + i];
    }
    if (text == NULL) {
        PyErr_SetString(PyExc_TypeError, "java_hash_unsigned() missing required argument 'text'");
        return NULL;
    }
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "java_hash_unsigned() needs a str, not %.100s",
                     Py_TYPE(text)->tp_name);
        return NULL;
    }
    if (str_ready(text) < 0)
        return NULL;
    uint32_t h = 0;
    if (seed != NULL) {
        if (PyLong_Check(seed)) {
            h = (uint32_t)PyLong_AsUnsignedLongLongMask(seed); /* seed mod 2^64, then 2^32 */
            if (h == (uint32_t)-1 && PyErr_Occurred())
                return NULL;
        }
        else {
            /* The pure function ignores a false seed and fails on any other non-int. */
            int truth = PyObject_IsTrue(seed);
            if (truth < 0)
                return NULL;
            if (truth) {
                PyErr_Format(PyExc_TypeError, "seed must be an int, not %.100s", Py_TYPE(seed)->tp_name);
                return NULL;
            }
        }
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *chars = (const Py_UCS1 *)data;
        for (Py_ssize_t i = 0; i < n; i++)
            h = 31 * h + chars[i];
    }
    else {
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, i);
            if (c < 0x10000) {
                if (IS_SURROGATE(c)) {
                    /* The pure function's UTF-16 encoding refuses a lone surrogate: raise its
                     * very error. */
                    PyObject *encoded = PyUnicode_AsEncodedString(text, "utf-16-le", "strict");
                    if (encoded != NULL) {
                        Py_DECREF(encoded);
                        PyErr_SetString(PyExc_SystemError, "_speedups: a surrogate encoded");
                    }
                    return NULL;
                }
                h = 31 * h + c;
            }
            else {
                c -= 0x10000;
                h = 31 * h + (0xD800 + (c >> 10));
                h = 31 * h + (0xDC00 + (c & 0x3FF));
            }
        }
    }
    return PyLong_FromUnsignedLong((unsigned long)h);
}

/* ------------------------------------------------------------------------------------------ */
/* Frames: FrameDecoder.next_command's split and decode_frame, on the receive buffer itself.     */

PyDoc_STRVAR(split_frame_doc,
"split_frame(buffer: bytearray | bytes, start: int, max_frame: int) -> tuple | None | False\n\n"
"The frame at buffer[start:] as (end, code, opaque, flag, remark, ext_fields, language,\n"
"version, serialize type, body); None while it is not whole; False for anything the pure\n"
"FrameDecoder must decide (it raises the precise error, or decodes what this does not).");

/* The frame at buffer[start:] as split_frame gives it (a new reference, None or False). */
static PyObject *
frame_at(const unsigned char *buffer, Py_ssize_t size, Py_ssize_t start, Py_ssize_t max_frame)
{
    if (start < 0 || start > size)
        Py_RETURN_FALSE;
    if (size - start < 4)
        Py_RETURN_NONE;
    int32_t total = read_i32(buffer + start);
    if (total < 4 || total > max_frame)
        Py_RETURN_FALSE;
    if (size - start - 4 < total)
        Py_RETURN_NONE;
    const unsigned char *frame = buffer + start + 4;
    uint32_t mark = (uint32_t)read_i32(frame);
    int serialize = (int)((mark >> 24) & 0xFF);
    Py_ssize_t header_length = (Py_ssize_t)(mark & 0xFFFFFF);
    if (header_length > total - 4)
        Py_RETURN_FALSE;
    PyObject *fields;
    if (serialize == 0)
        fields = json_header_at(frame + 4, frame + 4 + header_length);
    else if (serialize == 1)
        fields = binary_header_at(frame + 4, header_length);
    else
        Py_RETURN_FALSE;
    if (fields == NULL)
        return NULL;
    if (fields == Py_None) {
        Py_DECREF(fields);
        Py_RETURN_FALSE;
    }
    PyObject *body = PyBytes_FromStringAndSize((const char *)frame + 4 + header_length,
                                               total - 4 - header_length);
    if (body == NULL) {
        Py_DECREF(fields);
        return NULL;
    }
    /* fields: (code, opaque, flag, remark, ext_fields, language, version) */
    PyObject *result = Py_BuildValue("(nOOOOOOOiN)", start + 4 + (Py_ssize_t)total,
                                     PyTuple_GET_ITEM(fields, 0), PyTuple_GET_ITEM(fields, 1),
                                     PyTuple_GET_ITEM(fields, 2), PyTuple_GET_ITEM(fields, 3),
                                     PyTuple_GET_ITEM(fields, 4), PyTuple_GET_ITEM(fields, 5),
                                     PyTuple_GET_ITEM(fields, 6), serialize, body);
    Py_DECREF(fields);
    return result;
}

static PyObject *
split_frame(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    Py_ssize_t start, max_frame;
    if (nargs != 3 || !(PyByteArray_Check(args[0]) || PyBytes_Check(args[0]))) {
        PyErr_SetString(PyExc_TypeError, "split_frame(bytearray or bytes, int, int)");
        return NULL;
    }
    if (ssize_arg(args[1], &start) < 0 || ssize_arg(args[2], &max_frame) < 0)
        return NULL;
    if (PyBytes_Check(args[0])) /* (a read taken as it came: FrameDecoder.lone_frame) */
        return frame_at((const unsigned char *)PyBytes_AS_STRING(args[0]),
                        PyBytes_GET_SIZE(args[0]), start, max_frame);
    return frame_at((const unsigned char *)PyByteArray_AS_STRING(args[0]),
                    PyByteArray_GET_SIZE(args[0]), start, max_frame);
}

PyDoc_STRVAR(split_run_doc,
"split_run(buffer: bytearray, start: int, max_frame: int, code: int, limit: int)\n"
"    -> (list, tuple | None)\n\n"
"The whole frames at buffer[start:], each as split_frame gives it, while they are requests\n"
"(no response flag) of ``code``, at most ``limit``: FrameDecoder.next_run's split. It stops at\n"
"the first frame that is not whole, is of another code or a response, or that split_frame\n"
"would leave to the pure decoder (its error is raised when that frame is split by itself).\n"
"The second item is the frame it stopped at when it split it whole (another code, a\n"
"response), taken no more than the others after it, so that it need not be split again.");

static PyObject *
split_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    Py_ssize_t start, max_frame, code, limit;
    if (nargs != 5 || !PyByteArray_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "split_run(bytearray, int, int, int, int)");
        return NULL;
    }
    if (ssize_arg(args[1], &start) < 0 || ssize_arg(args[2], &max_frame) < 0
        || ssize_arg(args[3], &code) < 0 || ssize_arg(args[4], &limit) < 0)
        return NULL;
    PyObject *frames = PyList_New(0);
    if (frames == NULL)
        return NULL;
    PyObject *stop = NULL;
    /* The buffer is read through one pointer: nothing here resizes a bytearray (a collection
     * or a finalizer may run in an allocation, but none of them touches the receive buffer). */
    const unsigned char *buffer = (const unsigned char *)PyByteArray_AS_STRING(args[0]);
    Py_ssize_t size = PyByteArray_GET_SIZE(args[0]);
    while (PyList_GET_SIZE(frames) < limit) {
        PyObject *frame = frame_at(buffer, size, start, max_frame);
        if (frame == NULL) {
            PyErr_Clear();  /* split by itself, the frame raises its error there */
            break;
        }
        if (!PyTuple_Check(frame)) {  /* None (not whole) or False (for the pure decoder) */
            Py_DECREF(frame);
            break;
        }
        /* (code and flag come from int32 fields: always in range) */
        Py_ssize_t frame_code = PyLong_AsSsize_t(PyTuple_GET_ITEM(frame, 1));
        if (frame_code == -1 && PyErr_Occurred())
            PyErr_Clear();
        Py_ssize_t flag = PyLong_AsSsize_t(PyTuple_GET_ITEM(frame, 3));
        if (flag == -1 && PyErr_Occurred())
            PyErr_Clear();
        if (frame_code != code || (flag & 1)) {  /* bit 0: RESPONSE_FLAG */
            stop = frame;
            break;
        }
        start = PyLong_AsSsize_t(PyTuple_GET_ITEM(frame, 0));
        int appended = PyList_Append(frames, frame);
        Py_DECREF(frame);
        if (appended < 0) {
            Py_DECREF(frames);
            return NULL;
        }
    }
    if (stop == NULL) {
        stop = Py_None;
        Py_INCREF(stop);
    }
    return Py_BuildValue("(NN)", frames, stop);
}

/* ------------------------------------------------------------------------------------------ */
/* The SEND answers of a run: SendAnswerTemplate.frames, filled in one call.                     */

PyDoc_STRVAR(send_answers_doc,
"send_answers(pieces: tuple[bytes, ...], answers: list, max_frame: int) -> list[bytes] | None\n\n"
"Each (opaque, msgId, queue id, queue offset) of ``answers`` framed as the answer's header\n"
"pieces[0] msgId pieces[1] queueId pieces[2] queueOffset pieces[3] opaque pieces[4], with the\n"
"frame length and header length before it: SendAnswerTemplate.frames's direct format. None\n"
"for anything its Python twin must decide (a msgId that is not ASCII text, a number that is\n"
"not a plain int of 64 bits, a frame over ``max_frame``).");

static PyObject *
send_answers(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    Py_ssize_t max_frame;
    if (nargs != 3 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 5
        || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "send_answers(tuple of 5 bytes, list, int)");
        return NULL;
    }
    if (ssize_arg(args[2], &max_frame) < 0)
        return NULL;
    const char *piece[5];
    Py_ssize_t piece_size[5], fixed = 0;
    for (int i = 0; i < 5; i++) {
        PyObject *item = PyTuple_GET_ITEM(args[0], i);
        if (!PyBytes_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "send_answers: the pieces are bytes");
            return NULL;
        }
        piece[i] = PyBytes_AS_STRING(item);
        piece_size[i] = PyBytes_GET_SIZE(item);
        fixed += piece_size[i];
    }
    PyObject *answers = args[1];
    Py_ssize_t count = PyList_GET_SIZE(answers);
    PyObject *frames = PyList_New(count);
    if (frames == NULL)
        return NULL;
    for (Py_ssize_t n = 0; n < count; n++) {
        PyObject *answer = PyList_GET_ITEM(answers, n);
        /* (exact types: a subclass may read or print otherwise than its items and text) */
        if (!PyTuple_CheckExact(answer) || PyTuple_GET_SIZE(answer) != 4)
            goto python;
        PyObject *msg_id = PyTuple_GET_ITEM(answer, 1);
        if (!PyUnicode_CheckExact(msg_id) || !PyUnicode_IS_ASCII(msg_id))
            goto python;
        char number[3][24];
        Py_ssize_t number_size[3];
        static const int order[3] = {2, 3, 0};  /* queue id, queue offset, opaque */
        for (int i = 0; i < 3; i++) {
            PyObject *value = PyTuple_GET_ITEM(answer, order[i]);
            if (!PyLong_CheckExact(value))
                goto python;
            int overflow = 0;
            long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
            if (overflow || (v == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                goto python;
            }
            number_size[i] = (Py_ssize_t)snprintf(number[i], sizeof number[i], "%lld", v);
        }
        Py_ssize_t id_size = PyUnicode_GET_LENGTH(msg_id);
        Py_ssize_t size = fixed + id_size + number_size[0] + number_size[1] + number_size[2];
        if (size > max_frame - 4 || size > INT32_MAX - 4)
            goto python;
        PyObject *frame = PyBytes_FromStringAndSize(NULL, 8 + size);
        if (frame == NULL) {
            Py_DECREF(frames);
            return NULL;
        }
        unsigned char *out = (unsigned char *)PyBytes_AS_STRING(frame);
        uint32_t length = (uint32_t)(4 + size), header = (uint32_t)size;
        out[0] = (unsigned char)(length >> 24); out[1] = (unsigned char)(length >> 16);
        out[2] = (unsigned char)(length >> 8); out[3] = (unsigned char)length;
        out[4] = (unsigned char)(header >> 24); out[5] = (unsigned char)(header >> 16);
        out[6] = (unsigned char)(header >> 8); out[7] = (unsigned char)header;
        out += 8;
        memcpy(out, piece[0], (size_t)piece_size[0]); out += piece_size[0];
        memcpy(out, PyUnicode_DATA(msg_id), (size_t)id_size); out += id_size;
        for (int i = 0; i < 3; i++) {
            memcpy(out, piece[i + 1], (size_t)piece_size[i + 1]); out += piece_size[i + 1];
            memcpy(out, number[i], (size_t)number_size[i]); out += number_size[i];
        }
        memcpy(out, piece[4], (size_t)piece_size[4]);
        PyList_SET_ITEM(frames, n, frame);
    }
    return frames;
python:
    Py_DECREF(frames);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(fill_frame_doc,
"fill_frame(pieces: tuple[bytes, ...], order: tuple[int, ...], plain: bytes, opaque: int,\n"
"           values: tuple | list, body: bytes, max_frame: int) -> bytes | None\n\n"
"A FrameTemplate's whole frame: pieces[0], then for each slot i of `order` its value (the\n"
"opaque for -1, else values[order[i]]) and pieces[i + 1]; length prefixes before, `body`\n"
"after. A value is written as JSON's quoted, escaped string unless plain[index] is 1, when\n"
"it is written as it is (a str, or an int's decimal digits). None for anything its Python\n"
"twin (FrameTemplate._fill and _framed) must decide: a value of another type, a frame over\n"
"`max_frame`.");

/* One value's slot: its bytes once written, or -1 when the Python twin must decide. */
static Py_ssize_t
slot_size(PyObject *value, int plain, Number *number, Py_ssize_t *surrogates)
{
    if (PyUnicode_CheckExact(value)) {
        if (str_ready(value) < 0)
            return -2;
        Py_ssize_t size = text_size(value, !plain, surrogates);
        if (size < 0 || size > PY_SSIZE_T_MAX - 2)
            return -1;
        return plain ? size : size + 2;
    }
    if (!plain || !PyLong_CheckExact(value))
        return -1;
    int made = number_init(number, value);
    if (made < 0)
        return -2;
    return made ? number->length : -1;
}

#define FILL_SLOTS 32 /* a template's values and opaque at most (a send has 8) */

static PyObject *
fill_frame(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    Py_ssize_t max_frame;
    if (nargs != 7 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1])
        || !PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "fill_frame(tuple of bytes, tuple of int, bytes, int, values, body, int)");
        return NULL;
    }
    if (!PyBytes_Check(args[5])) /* (a bytearray or memoryview body: the twin joins it) */
        Py_RETURN_NONE;
    if (ssize_arg(args[6], &max_frame) < 0)
        return NULL;
    if (max_frame > INT32_MAX) /* (the length prefix is an int32) */
        max_frame = INT32_MAX;
    PyObject *pieces = args[0], *order = args[1], *opaque = args[3], *values = args[4];
    PyObject *body = args[5];
    const char *plain = PyBytes_AS_STRING(args[2]);
    Py_ssize_t plain_count = PyBytes_GET_SIZE(args[2]);
    Py_ssize_t slots = PyTuple_GET_SIZE(order);
    if (slots > FILL_SLOTS || PyTuple_GET_SIZE(pieces) != slots + 1)
        Py_RETURN_NONE;
    if (!(PyTuple_CheckExact(values) || PyList_CheckExact(values)) || !PyLong_CheckExact(opaque))
        Py_RETURN_NONE;
    Py_ssize_t value_count = PySequence_Fast_GET_SIZE(values);
    if (value_count != plain_count) /* (the twin unpacks exactly its values, or raises) */
        Py_RETURN_NONE;
    PyObject *const *items = PySequence_Fast_ITEMS(values);
    PyObject *slot_value[FILL_SLOTS];
    int slot_plain[FILL_SLOTS];
    Number numbers[FILL_SLOTS];
    Py_ssize_t surrogates = 0, size = 0, made = 0;
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < slots; i++)
        numbers[i].big = NULL; /* (set by number_init for the slots that are ints) */
    for (Py_ssize_t i = 0; i <= slots; i++) {
        PyObject *piece = PyTuple_GET_ITEM(pieces, i);
        if (!PyBytes_Check(piece)) {
            PyErr_SetString(PyExc_TypeError, "fill_frame: the pieces are bytes");
            return NULL;
        }
        size += PyBytes_GET_SIZE(piece); /* (each well below PY_SSIZE_T_MAX / 33) */
    }
    for (; made < slots; made++) {
        Py_ssize_t index = PyLong_AsSsize_t(PyTuple_GET_ITEM(order, made));
        if (index == -1 && PyErr_Occurred())
            goto done;
        if (index < -1 || index >= value_count || (index >= 0 && index >= plain_count)) {
            result = Py_None; /* (a template that does not fit its values: the twin raises) */
            goto done;
        }
        slot_value[made] = index < 0 ? opaque : items[index];
        slot_plain[made] = index < 0 ? 1 : plain[index] != 0;
        Py_ssize_t bytes = slot_size(slot_value[made], slot_plain[made], &numbers[made],
                                     &surrogates);
        if (bytes == -2)
            goto done;
        if (bytes < 0 || size > PY_SSIZE_T_MAX - bytes) {
            result = Py_None;
            goto done;
        }
        size += bytes;
    }
    Py_ssize_t body_size = PyBytes_GET_SIZE(body);
    if (size > INT32_MAX - 4 || body_size > max_frame - 4 - size || size >= (1 << 24)) {
        result = Py_None; /* (the twin words the limit) */
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, 8 + size + body_size);
    if (result == NULL)
        goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    uint32_t length = (uint32_t)(4 + size + body_size), header = (uint32_t)size;
    out[0] = (unsigned char)(length >> 24); out[1] = (unsigned char)(length >> 16);
    out[2] = (unsigned char)(length >> 8); out[3] = (unsigned char)length;
    out[4] = (unsigned char)(header >> 24); out[5] = (unsigned char)(header >> 16);
    out[6] = (unsigned char)(header >> 8); out[7] = (unsigned char)header;
    char *w = (char *)out + 8;
    for (Py_ssize_t i = 0; i <= slots; i++) {
        PyObject *piece = PyTuple_GET_ITEM(pieces, i);
        memcpy(w, PyBytes_AS_STRING(piece), (size_t)PyBytes_GET_SIZE(piece));
        w += PyBytes_GET_SIZE(piece);
        if (i == slots)
            break;
        PyObject *value = slot_value[i];
        if (PyUnicode_CheckExact(value)) {
            if (!slot_plain[i])
                *w++ = '"';
            w = write_text(w, value, !slot_plain[i]);
            if (!slot_plain[i])
                *w++ = '"';
        }
        else
            w = number_write(w, &numbers[i]);
    }
    memcpy(w, PyBytes_AS_STRING(body), (size_t)body_size);
done:
    for (Py_ssize_t i = 0; i < slots; i++)
        Py_XDECREF(numbers[i].big);
    if (result == Py_None)
        Py_RETURN_NONE;
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* Request headers: the straight-line decoder of cluster/remoting/header.py, field by field.    */

enum { FIELD_INT = 0, FIELD_BOOL = 1, FIELD_TEXT = 2 };

/* A decimal int64 written plainly: an optional '-' and 1 to 18 ASCII digits (so no overflow).
 * 0 with *out set, -1 for anything else (the reference parses or refuses it). */
static int
plain_int(PyObject *raw, long long *out)
{
    if (!PyUnicode_IS_ASCII(raw))
        return -1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(raw);
    const char *p = (const char *)PyUnicode_1BYTE_DATA(raw);
    int negative = (n > 0 && p[0] == '-');
    Py_ssize_t digits = n - negative;
    if (digits < 1 || digits > 18)
        return -1;
    long long value = 0;
    for (Py_ssize_t i = negative; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        value = value * 10 + (p[i] - '0');
    }
    *out = negative ? -value : value;
    return 0;
}

/* "true" in any ASCII case: 1, anything else ASCII: 0, non-ASCII: -1 (str.lower() decides). */
static int
ascii_true(PyObject *raw)
{
    if (!PyUnicode_IS_ASCII(raw))
        return -1;
    if (PyUnicode_GET_LENGTH(raw) != 4)
        return 0;
    const char *p = (const char *)PyUnicode_1BYTE_DATA(raw);
    return (p[0] | 0x20) == 't' && (p[1] | 0x20) == 'r' && (p[2] | 0x20) == 'u'
        && (p[3] | 0x20) == 'e';
}

/* One field's value by its plan entry into *out (a new reference): 1 done, 0 for the
 * reference to decide, -1 on a Python error. */
int
decode_header_value(PyObject *values, PyObject *spec, int aliased, PyObject **out)
{
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 9)
        return 0;
    PyObject *name = PyTuple_GET_ITEM(spec, 1);
    PyObject *shortname = PyTuple_GET_ITEM(spec, 2);
    long kind = PyLong_AsLong(PyTuple_GET_ITEM(spec, 3));
    if (kind == -1 && PyErr_Occurred())
        return -1;
    PyObject *raw = PyDict_GetItemWithError(values, name);  /* borrowed */
    if (raw == NULL && PyErr_Occurred())
        return -1;
    if (raw == NULL && aliased && shortname != Py_None) {
        raw = PyDict_GetItemWithError(values, shortname);
        if (raw == NULL && PyErr_Occurred())
            return -1;
    }
    PyObject *value;
    if (raw != NULL && !PyUnicode_Check(raw))
        return 0;
    if (raw != NULL && str_ready(raw) < 0)
        return -1;
    if (raw == NULL || PyUnicode_GET_LENGTH(raw) == 0) {
        /* Absent or empty: Java leaves the field null; a required one is the reference's. */
        int required = PyObject_IsTrue(PyTuple_GET_ITEM(spec, 7));
        if (required != 0)
            return required < 0 ? -1 : 0;
        value = PyTuple_GET_ITEM(spec, 6);
        Py_INCREF(value);
    }
    else if (kind == FIELD_INT) {
        long long number, minimum, maximum;
        if (plain_int(raw, &number) < 0)
            return 0;
        minimum = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 4));
        if (minimum == -1 && PyErr_Occurred())
            return -1;
        maximum = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 5));
        if (maximum == -1 && PyErr_Occurred())
            return -1;
        if (number < minimum || number > maximum)
            return 0;
        value = PyLong_FromLongLong(number);
        if (value == NULL)
            return -1;
    }
    else if (kind == FIELD_BOOL) {
        int truth = ascii_true(raw);
        if (truth < 0)
            return 0;
        value = truth ? Py_True : Py_False;
        Py_INCREF(value);
    }
    else if (kind == FIELD_TEXT) {
        Py_ssize_t limit = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, 8));
        if (limit == -1 && PyErr_Occurred())
            return -1;
        if (limit >= 0 && PyUnicode_GET_LENGTH(raw) > limit)
            return 0;
        value = raw;
        Py_INCREF(value);
    }
    else {
        return 0;
    }
    *out = value;
    return 1;
}

/* One field into target[attr]: 1 done, 0 for the reference to decide, -1 on a Python error. */
static int
decode_header_field(PyObject *values, PyObject *spec, int aliased, PyObject *target)
{
    PyObject *value = NULL;
    int done = decode_header_value(values, spec, aliased, &value);
    if (done <= 0)
        return done;
    int failed = PyDict_SetItem(target, PyTuple_GET_ITEM(spec, 0), value);
    Py_DECREF(value);
    return failed < 0 ? -1 : 1;
}

PyDoc_STRVAR(decode_header_fields_doc,
"decode_header_fields(values, plan, aliased, target) -> bool\n\n"
"Decode a request's extFields into target (a header's __dict__) by the plan, a tuple of\n"
"(attr, name, short name or None, kind 0 int / 1 bool / 2 text, minimum, maximum, default,\n"
"required, max length or -1) a field. False for anything the reference decoder must decide.");

static PyObject *
decode_header_fields(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "decode_header_fields() takes 4 arguments");
        return NULL;
    }
    PyObject *values = args[0], *plan = args[1], *target = args[3];
    int aliased = PyObject_IsTrue(args[2]);
    if (aliased < 0)
        return NULL;
    if (!PyDict_Check(values) || !PyTuple_Check(plan) || !PyDict_Check(target))
        Py_RETURN_FALSE;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(plan); i++) {
        int done = decode_header_field(values, PyTuple_GET_ITEM(plan, i), aliased, target);
        if (done < 0)
            return NULL;
        if (done == 0)
            Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

/* ------------------------------------------------------------------------------------------ */

static PyMethodDef methods[] = {
    {"decode_json_header", (PyCFunction)decode_json_header, METH_O, decode_json_header_doc},
    {"decode_binary_header", (PyCFunction)decode_binary_header, METH_O, decode_binary_header_doc},
    {"encode_json_header", (PyCFunction)(void (*)(void))encode_json_header, METH_FASTCALL,
     encode_json_header_doc},
    {"encode_binary_header", (PyCFunction)(void (*)(void))encode_binary_header, METH_FASTCALL,
     encode_binary_header_doc},
    {"split_frame", (PyCFunction)(void (*)(void))split_frame, METH_FASTCALL, split_frame_doc},
    {"split_run", (PyCFunction)(void (*)(void))split_run, METH_FASTCALL, split_run_doc},
    {"send_answers", (PyCFunction)(void (*)(void))send_answers, METH_FASTCALL,
     send_answers_doc},
    {"fill_frame", (PyCFunction)(void (*)(void))fill_frame, METH_FASTCALL, fill_frame_doc},
    {"decode_header_fields", (PyCFunction)(void (*)(void))decode_header_fields, METH_FASTCALL,
     decode_header_fields_doc},
    {"java_hash_unsigned", (PyCFunction)(void (*)(void))java_hash_unsigned,
     METH_FASTCALL | METH_KEYWORDS, java_hash_unsigned_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "common._speedups",
    "The compiled core of the remoting codec and Java's String.hashCode (see common/speedups.py).",
    -1,
    methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (str_true == NULL) {
        for (int i = 0; i < LANGUAGE_COUNT; i++) {
            language_names[i] = PyUnicode_InternFromString(LANGUAGE_NAMES[i]);
            if (language_names[i] == NULL)
                return NULL;
        }
        str_false = PyUnicode_InternFromString("false");
        if (str_false == NULL)
            return NULL;
        str_true = PyUnicode_InternFromString("true");
        if (str_true == NULL)
            return NULL;
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module != NULL && send_fields_add_functions(module) < 0)
        Py_CLEAR(module);
    return module;
}
