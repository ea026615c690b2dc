/* .npy reading and writing (format versions 1-3, little-endian, C order) and deterministic input fill. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fxc_runtime.h"


typedef struct {
    char kind;
    int32_t size;
    int32_t dtype;
    const char *name;
} dtype_info;

static const dtype_info DTYPES[] = {
    {'f', 4, 1, "float32"}, {'u', 1, 2, "uint8"},   {'i', 1, 3, "int8"},     {'u', 2, 4, "uint16"},
    {'i', 2, 5, "int16"},   {'i', 4, 6, "int32"},   {'i', 8, 7, "int64"},    {'b', 1, 9, "bool"},
    {'f', 2, 10, "float16"}, {'f', 8, 11, "float64"}, {'u', 4, 12, "uint32"}, {'u', 8, 13, "uint64"},
    /* Storage-only dtypes (ml_dtypes): .npy files hold their raw bits as uint16 (bfloat16) or uint8,
       one element per byte for the 4-bit and 2-bit types. Listed after the plain types, so a .npy
       descr names the plain type first. */
    {'u', 2, 16, "bfloat16"}, {'u', 1, 17, "float8_e4m3fn"}, {'u', 1, 18, "float8_e4m3fnuz"},
    {'u', 1, 19, "float8_e5m2"}, {'u', 1, 20, "float8_e5m2fnuz"}, {'u', 1, 21, "uint4"}, {'u', 1, 22, "int4"},
    {'u', 1, 23, "float4_e2m1fn"}, {'u', 1, 24, "float8_e8m0fnu"}, {'u', 1, 25, "uint2"}, {'u', 1, 26, "int2"},
    /* Strings: numpy's fixed-width 'U' (UTF-32 code units, `size` bytes per character) and 'S' (bytes); the width
       in characters is the descr's number (npy_strings below). */
    {'U', 4, 8, "string"}, {'S', 1, 8, "string"},
};
#define NUM_DTYPES ((int)(sizeof DTYPES / sizeof DTYPES[0]))

static const dtype_info *find_dtype(int32_t dtype)
{
    for (int i = 0; i < NUM_DTYPES; i++)
        if (DTYPES[i].dtype == dtype)
            return &DTYPES[i];
    return NULL;
}

size_t fxc_dtype_size(int32_t dtype)
{
    if (dtype == 8)  /* a string element in the C API is a `const char *` */
        return sizeof(const char *);
    const dtype_info *info = find_dtype(dtype);
    return info ? (size_t)info->size : 0;
}

const char *fxc_dtype_name(int32_t dtype)
{
    const dtype_info *info = find_dtype(dtype);
    return info ? info->name : "unsupported";
}

static int fail(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    return -1;
}

static void format_shape(char *buf, size_t len, int32_t rank, const int64_t *shape)
{
    size_t used = (size_t)snprintf(buf, len, "(");
    for (int32_t d = 0; d < rank && used < len; d++)
        used += (size_t)snprintf(buf + used, len - used, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (used < len)
        snprintf(buf + used, len - used, rank == 1 ? ",)" : ")");
}

/* Header text for a message: printable ASCII as is, every other byte as \xNN (a file may hold anything). */
static void printable(char *dst, size_t len, const char *src, size_t n)
{
    static const char HEX[] = "0123456789abcdef";
    size_t used = 0;
    for (size_t i = 0; i < n && used + 5 < len; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            dst[used++] = (char)c;
        } else {
            dst[used++] = '\\';
            dst[used++] = 'x';
            dst[used++] = HEX[c >> 4];
            dst[used++] = HEX[c & 15];
        }
    }
    dst[used] = '\0';
}

static const char *skip_spaces(const char *p)
{
    while (*p == ' ')
        p++;
    return p;
}

/* The dtype of a descr such as '<f4' / '|u1' (byte order checked), or -1 with the message in err. */
static int parse_descr(const char *descr, size_t n, const char *path, const dtype_info **dtype, int64_t *width,
                       char *err, size_t err_len)
{
    char shown[64];
    printable(shown, sizeof shown, descr, n);
    *width = 0;
    if (n >= 3 && n <= 12 && (descr[1] == 'U' || descr[1] == 'S')) { /* '<U12', '|S5': a width in characters */
        for (size_t i = 2; i < n; i++) {
            if (descr[i] < '0' || descr[i] > '9')
                return fail(err, err_len, "%s: unsupported .npy dtype '%s'", path, shown);
            *width = *width * 10 + (descr[i] - '0');
        }
        *dtype = &DTYPES[NUM_DTYPES - (descr[1] == 'U' ? 2 : 1)];
        if (descr[0] == '>' && descr[1] == 'U')
            return fail(err, err_len, "%s: big-endian .npy data is not supported; save it with arr.astype(arr.dtype.newbyteorder('<'))", path);
        return 0;
    }
    if (n < 3 || n > 4 || descr[2] < '1' || descr[2] > '8' || (n == 4 && (descr[3] < '0' || descr[3] > '9')))
        return fail(err, err_len, "%s: unsupported .npy dtype '%s'", path, shown);
    char order = descr[0], kind = descr[1];
    int32_t size = descr[2] - '0';
    if (n == 4)
        size = size * 10 + (descr[3] - '0');
    *dtype = NULL;
    for (int i = 0; i < NUM_DTYPES && !*dtype; i++)
        if (DTYPES[i].kind == kind && DTYPES[i].size == size)
            *dtype = &DTYPES[i];
    if (!*dtype)
        return fail(err, err_len, "%s: unsupported .npy dtype '%s'", path, shown);
    if (order == '>' && size > 1)
        return fail(err, err_len, "%s: big-endian .npy data is not supported; save it with arr.astype(arr.dtype.newbyteorder('<'))", path);
    if (order != '<' && order != '|' && order != '=' && order != '>')
        return fail(err, err_len, "%s: bad byte order in .npy dtype '%s'", path, shown);
    return 0;
}

/* The header dict, exactly as numpy writes and reads it: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
   in any key order, each key once, then spaces and a newline. Anything else is refused (numpy refuses it too). */
static int parse_header(const char *header, const char *path, const dtype_info **dtype, int64_t *width, int *fortran,
                        int32_t *rank, int64_t *shape, char *err, size_t err_len)
{
    int seen_descr = 0, seen_fortran = 0, seen_shape = 0;
    const char *p = skip_spaces(header);
    if (*p++ != '{')
        goto bad;
    for (;;) {
        p = skip_spaces(p);
        if (*p == '}')
            break;
        char quote = *p++;
        if (quote != '\'' && quote != '"')
            goto bad;
        const char *key = p, *key_end = strchr(p, quote);
        if (!key_end)
            goto bad;
        size_t key_len = (size_t)(key_end - key);
        p = skip_spaces(key_end + 1);
        if (*p++ != ':')
            goto bad;
        p = skip_spaces(p);
        if (key_len == 5 && memcmp(key, "descr", 5) == 0 && !seen_descr) {
            char q = *p++;
            const char *value_end = (q == '\'' || q == '"') ? strchr(p, q) : NULL;
            if (!value_end)
                return fail(err, err_len, "%s: .npy header has no simple 'descr' (structured dtypes are not supported)", path);
            if (parse_descr(p, (size_t)(value_end - p), path, dtype, width, err, err_len) != 0)
                return -1;
            p = value_end + 1;
            seen_descr = 1;
        } else if (key_len == 13 && memcmp(key, "fortran_order", 13) == 0 && !seen_fortran) {
            if (strncmp(p, "True", 4) == 0) {
                *fortran = 1;
                p += 4;
            } else if (strncmp(p, "False", 5) == 0) {
                *fortran = 0;
                p += 5;
            } else {
                goto bad;
            }
            seen_fortran = 1;
        } else if (key_len == 5 && memcmp(key, "shape", 5) == 0 && !seen_shape) {
            if (*p++ != '(')
                goto bad;
            *rank = 0;
            for (;;) {
                p = skip_spaces(p);
                if (*p == ')')
                    break;
                if (*p < '0' || *p > '9' || *rank >= FXC_NPY_MAX_RANK)
                    return fail(err, err_len, "%s: bad shape in .npy header", path);
                int64_t dim = 0;
                while (*p >= '0' && *p <= '9') {
                    if (dim > (INT64_MAX - 9) / 10)
                        return fail(err, err_len, "%s: bad shape in .npy header", path);
                    dim = dim * 10 + (*p++ - '0');
                }
                shape[(*rank)++] = dim;
                p = skip_spaces(p);
                if (*p == ',')
                    p++;
                else if (*p != ')')
                    return fail(err, err_len, "%s: bad shape in .npy header", path);
            }
            p++;
            seen_shape = 1;
        } else {
            goto bad;
        }
        p = skip_spaces(p);
        if (*p == ',')
            p++;
        else if (*p != '}')
            goto bad;
    }
    p = skip_spaces(p + 1);
    if (*p == '\n')
        p++;
    if (*p != '\0')
        goto bad;
    if (!seen_descr)
        return fail(err, err_len, "%s: .npy header has no simple 'descr' (structured dtypes are not supported)", path);
    if (!seen_fortran)
        return fail(err, err_len, "%s: .npy header has no fortran_order", path);
    if (!seen_shape)
        return fail(err, err_len, "%s: .npy header has no shape", path);
    return 0;
bad: {
        char shown[128];
        printable(shown, sizeof shown, header, strlen(header));
        return fail(err, err_len, "%s: malformed .npy header: %s", path, shown);
    }
}

static int read_exact(FILE *fh, void *buf, size_t n) { return fread(buf, 1, n, fh) == n ? 0 : -1; }

/* Open a .npy file, check its header and its dtype against spec's; the file positioned at its data, or NULL with the
   message in err. */
static FILE *npy_open_any(const char *path, const fxc_tensor_spec *spec, int32_t *rank, int64_t *shape, int *fortran,
                          const dtype_info **found, int64_t *width, char *err, size_t err_len)
{
    FILE *fh = fopen(path, "rb");
    if (!fh) {
        fail(err, err_len, "%s: cannot open", path);
        return NULL;
    }
    unsigned char magic[8], len_bytes[4];
    char *header = NULL;
    int rc = -1;
    if (read_exact(fh, magic, 8) != 0 || memcmp(magic, "\x93NUMPY", 6) != 0) {
        fail(err, err_len, "%s: not a .npy file (bad magic)", path);
        goto done;
    }
    if (magic[6] < 1 || magic[6] > 3 || magic[7] != 0) {
        fail(err, err_len, "%s: unsupported .npy format version %d", path, magic[6]);
        goto done;
    }
    size_t len_size = magic[6] == 1 ? 2 : 4;
    if (read_exact(fh, len_bytes, len_size) != 0) {
        fail(err, err_len, "%s: truncated .npy header", path);
        goto done;
    }
    uint32_t header_len = (uint32_t)len_bytes[0] | (uint32_t)len_bytes[1] << 8;
    if (len_size == 4)
        header_len |= (uint32_t)len_bytes[2] << 16 | (uint32_t)len_bytes[3] << 24;
    if (header_len > (1u << 16) || !(header = malloc((size_t)header_len + 1))) {
        fail(err, err_len, "%s: .npy header too large", path);
        goto done;
    }
    if (read_exact(fh, header, header_len) != 0) {
        fail(err, err_len, "%s: truncated .npy header", path);
        goto done;
    }
    header[header_len] = '\0';

    const dtype_info *dtype;
    if (memchr(header, '\0', header_len)) { /* the C string would end there; numpy refuses the file */
        fail(err, err_len, "%s: malformed .npy header: a NUL byte in it", path);
        goto done;
    }
    if (parse_header(header, path, &dtype, width, fortran, rank, shape, err, err_len) != 0)
        goto done;
    *found = dtype;
    const dtype_info *want = find_dtype(spec->dtype);
    if (spec->dtype == 8 && dtype->dtype != 8) {
        fail(err, err_len, "%s: dtype %s does not match the strings expected for '%s' (save a numpy 'U' or 'S' array: "
             "arr.astype(str))", path, dtype->name, spec->name);
        goto done;
    }
    if (spec->dtype != 8 && (!want || want->kind != dtype->kind || want->size != dtype->size)) {
        fail(err, err_len, "%s: dtype %s does not match %s expected for '%s'%s", path, dtype->name,
             fxc_dtype_name(spec->dtype), spec->name,
             want && want->dtype >= 16 ? (want->size == 2 ? " (stored as uint16 bits)" : " (stored as uint8 bits)") : "");
        goto done;
    }
    rc = 0;
done:
    free(header);
    if (rc != 0) {
        fclose(fh);
        return NULL;
    }
    return fh;
}

/* Close fh and fail with the file's shape against the one the spec expects. */
static int shape_mismatch(FILE *fh, const char *path, const fxc_tensor_spec *spec, int32_t rank, const int64_t *shape,
                          char *err, size_t err_len)
{
    char got[256], want[256];
    format_shape(got, sizeof got, rank, shape);
    format_shape(want, sizeof want, spec->rank, spec->shape);
    fclose(fh);
    return fail(err, err_len, "%s: shape %s does not match %s expected for '%s'", path, got, want, spec->name);
}

static FILE *npy_open(const char *path, const fxc_tensor_spec *spec, int32_t *rank, int64_t *shape, int *fortran,
                      char *err, size_t err_len)
{
    const dtype_info *found;
    int64_t width;
    if (spec->dtype == 8) {
        fail(err, err_len, "%s: '%s' is a string tensor: read it with fxc_npy_read_strings", path, spec->name);
        return NULL;
    }
    return npy_open_any(path, spec, rank, shape, fortran, &found, &width, err, err_len);
}

/* Read `nbytes` of C-order data of `shape` from fh (closed here). */
static int npy_data(FILE *fh, const char *path, int fortran, int32_t rank, const int64_t *shape, void *data,
                    size_t nbytes, char *err, size_t err_len)
{
    int big_dims = 0, rc = -1;
    for (int32_t d = 0; d < rank; d++)
        big_dims += shape[d] > 1;
    if (fortran && big_dims > 1)
        fail(err, err_len, "%s: Fortran-order .npy is not supported; save np.ascontiguousarray(arr)", path);
    else if (read_exact(fh, data, nbytes) != 0)
        fail(err, err_len, "%s: truncated .npy data (expected %zu bytes)", path, nbytes);
    else
        rc = 0;
    fclose(fh);
    return rc;
}

int fxc_npy_read(const char *path, const fxc_tensor_spec *spec, void *data, char *err, size_t err_len)
{
    int fortran;
    int32_t rank;
    int64_t shape[FXC_NPY_MAX_RANK];
    FILE *fh = npy_open(path, spec, &rank, shape, &fortran, err, err_len);
    if (!fh)
        return -1;
    int same_shape = rank == spec->rank;
    for (int32_t d = 0; same_shape && d < rank; d++)
        same_shape = shape[d] == spec->shape[d];
    if (!same_shape)
        return shape_mismatch(fh, path, spec, rank, shape, err, err_len);
    return npy_data(fh, path, fortran, rank, shape, data, spec->nbytes, err, err_len);
}

int fxc_npy_open(const char *path, const fxc_tensor_spec *spec, fxc_npy_file *file, char *err, size_t err_len)
{
    FILE *fh = npy_open(path, spec, &file->rank, file->shape, &file->fortran, err, err_len);
    file->fh = fh;
    file->path = path;
    if (!fh)
        return -1;
    if (file->rank != spec->rank) {
        char got[256];
        format_shape(got, sizeof got, file->rank, file->shape);
        fxc_npy_close(file);
        return fail(err, err_len, "%s: shape %s has rank %d, '%s' has rank %d", path, got, (int)file->rank, spec->name,
                    (int)spec->rank);
    }
    return 0;
}

int fxc_npy_read_open(fxc_npy_file *file, const fxc_tensor_spec *spec, void *data, char *err, size_t err_len)
{
    size_t nbytes = fxc_dtype_size(spec->dtype);
    int fits = file->fh && file->rank == spec->rank;
    for (int32_t d = 0; fits && d < file->rank; d++) {
        fits = file->shape[d] <= spec->shape[d];
        nbytes *= (size_t)file->shape[d];
    }
    if (!fits) { /* a caller that skipped fxc_check_input_shapes: never read past the buffer */
        char got[256], most[256];
        format_shape(got, sizeof got, file->rank, file->shape);
        format_shape(most, sizeof most, spec->rank, spec->shape);
        fxc_npy_close(file);
        return fail(err, err_len, "%s: shape %s is not within %s, the most '%s' takes", file->path, got, most, spec->name);
    }
    FILE *fh = file->fh;
    file->fh = NULL;
    return npy_data(fh, file->path, file->fortran, file->rank, file->shape, data, nbytes, err, err_len);
}

void fxc_npy_close(fxc_npy_file *file)
{
    if (file->fh)
        fclose(file->fh);
    file->fh = NULL;
}

static int npy_write(const char *path, const fxc_tensor_spec *spec, const char *order_kind, int64_t size,
                     const void *data, char *err, size_t err_len);

int fxc_npy_write(const char *path, const fxc_tensor_spec *spec, const void *data, char *err, size_t err_len)
{
    const dtype_info *info = find_dtype(spec->dtype);
    if (!info || spec->dtype == 8)
        return fail(err, err_len, "%s: unsupported dtype code %d", path, (int)spec->dtype);
    char order_kind[3] = {info->size == 1 ? '|' : '<', info->kind, '\0'};
    return npy_write(path, spec, order_kind, info->size, data, err, err_len);
}

/* Write spec->nbytes of `data` under the descr order_kind + size ("<f" 4, "<U" 7). */
static int npy_write(const char *path, const fxc_tensor_spec *spec, const char *order_kind, int64_t size,
                     const void *data, char *err, size_t err_len)
{
    char shape[1024], dict[1200];
    format_shape(shape, sizeof shape, spec->rank, spec->shape);
    int dict_len = snprintf(dict, sizeof dict, "{'descr': '%s%lld', 'fortran_order': False, 'shape': %s, }",
                            order_kind, (long long)size, shape);
    /* Version 1: magic(6) + version(2) + u16 length; pad with spaces so the data starts 64-byte aligned. */
    size_t total = 10 + (size_t)dict_len + 1;
    size_t padded = (total + 63) / 64 * 64;
    size_t header_len = padded - 10;
    unsigned char prefix[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                (unsigned char)(header_len & 0xff), (unsigned char)(header_len >> 8)};
    /* Written under a temporary name beside it and renamed when complete: never a half-written file. */
    size_t tmp_len = strlen(path) + 32;
    char *tmp = malloc(tmp_len);
    if (!tmp)
        return fail(err, err_len, "%s: out of memory", path);
    snprintf(tmp, tmp_len, "%s.tmp-%ld", path, (long)getpid());
    FILE *fh = fopen(tmp, "wb");
    if (!fh) {
        free(tmp);
        return fail(err, err_len, "%s: cannot create", path);
    }
    int ok = fwrite(prefix, 1, 10, fh) == 10 && fwrite(dict, 1, (size_t)dict_len, fh) == (size_t)dict_len;
    for (size_t i = (size_t)dict_len; ok && i + 1 < header_len; i++)
        ok = fputc(' ', fh) != EOF;
    ok = ok && fputc('\n', fh) != EOF;
    ok = ok && fwrite(data, 1, spec->nbytes, fh) == spec->nbytes;
    ok = (fclose(fh) == 0) && ok;
    ok = ok && rename(tmp, path) == 0;
    if (!ok)
        remove(tmp);
    free(tmp);
    return ok ? 0 : fail(err, err_len, "%s: write failed", path);
}

#define GOLDEN 0x9E3779B97F4A7C15ULL

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Round-to-nearest-even float -> IEEE half. */
static uint16_t half_from_float(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t biased = (x >> 23) & 0xffu;
    uint32_t mant = x & 0x7fffffu;
    int32_t exp = (int32_t)biased - 127 + 15;
    if (biased == 0xffu)
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0u));
    if (exp >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) {
        if (exp < -10)
            return (uint16_t)sign;
        mant |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = mant >> shift, rem = mant & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (half & 1u)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = ((uint32_t)exp << 10) | (mant >> 13), rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u)))
        half++;
    return (uint16_t)(sign | half);
}

/* Filler codes of the 1-byte storage-only dtypes (ONNX codes 17..26) for `small` = 0..9: the floats
   (small - 5) / 4 (float8_e8m0fnu: 2^(small - 5)), int4 small - 5, uint4 small, int2 small % 4 - 2,
   uint2 small % 4, rounded by ml_dtypes (fluidml_xc.execute._lowp_fill computes the same). */
static const unsigned char LOWP_FILL[10][10] = {
    {0xba, 0xb8, 0xb4, 0xb0, 0xa8, 0x00, 0x28, 0x30, 0x34, 0x38}, /* 17 float8_e4m3fn */
    {0xc2, 0xc0, 0xbc, 0xb8, 0xb0, 0x00, 0x30, 0x38, 0x3c, 0x40}, /* 18 float8_e4m3fnuz */
    {0xbd, 0xbc, 0xba, 0xb8, 0xb4, 0x00, 0x34, 0x38, 0x3a, 0x3c}, /* 19 float8_e5m2 */
    {0xc1, 0xc0, 0xbe, 0xbc, 0xb8, 0x00, 0x38, 0x3c, 0x3e, 0x40}, /* 20 float8_e5m2fnuz */
    {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09}, /* 21 uint4 */
    {0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x00, 0x01, 0x02, 0x03, 0x04}, /* 22 int4 */
    {0x0a, 0x0a, 0x0a, 0x09, 0x08, 0x00, 0x00, 0x01, 0x02, 0x02}, /* 23 float4_e2m1fn */
    {0x7a, 0x7b, 0x7c, 0x7d, 0x7e, 0x7f, 0x80, 0x81, 0x82, 0x83}, /* 24 float8_e8m0fnu */
    {0x00, 0x01, 0x02, 0x03, 0x00, 0x01, 0x02, 0x03, 0x00, 0x01}, /* 25 uint2 */
    {0x02, 0x03, 0x00, 0x01, 0x02, 0x03, 0x00, 0x01, 0x02, 0x03}, /* 26 int2 */
};

/* Element j of input `index` is mix64(stream + (j+1)*GOLDEN) with stream = mix64(seed + (index+1)*GOLDEN)
   (splitmix64, counter based, mirrored by fluidml_xc.execute.random_feeds).
   Floats in [-1, 1) (float16 on a 1/512 grid, bfloat16 on a 1/64 grid), integers in [0, 10), bools 0/1,
   the other storage-only dtypes from LOWP_FILL. */
static const char *const DIGIT_TEXT[10] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};

void fxc_fill_random(const fxc_tensor_spec *spec, void *data, uint64_t seed, int32_t index)
{
    size_t size = fxc_dtype_size(spec->dtype);
    if (!size)
        return;
    size_t count = spec->nbytes / size;
    uint64_t stream = mix64(seed + (uint64_t)(index + 1) * GOLDEN);
    if (spec->dtype == 8) { /* strings: the digit of the integers' filler, "0" to "9" */
        for (size_t j = 0; j < count; j++)
            ((const char **)data)[j] = DIGIT_TEXT[mix64(stream + (uint64_t)(j + 1) * GOLDEN) % 10u];
        return;
    }
    unsigned char *out = data;
    for (size_t j = 0; j < count; j++) {
        uint64_t v = mix64(stream + (uint64_t)(j + 1) * GOLDEN);
        unsigned char *dst = out + j * size;
        float f32;
        double f64;
        uint16_t f16;
        uint64_t small = v % 10u;
        switch (spec->dtype) {
        case 1:
            f32 = (float)((double)(v >> 40) / 8388608.0 - 1.0);
            memcpy(dst, &f32, 4);
            break;
        case 11:
            f64 = (double)(v >> 40) / 8388608.0 - 1.0;
            memcpy(dst, &f64, 8);
            break;
        case 10:
            f16 = half_from_float((float)((double)(v >> 54) / 512.0 - 1.0));
            memcpy(dst, &f16, 2);
            break;
        case 9:
            dst[0] = (unsigned char)(v >> 63);
            break;
        case 16: {
            uint32_t bits;
            f32 = (float)((double)(v >> 57) / 64.0 - 1.0);
            memcpy(&bits, &f32, 4);
            f16 = (uint16_t)(bits >> 16);
            memcpy(dst, &f16, 2);
            break;
        }
        case 17: case 18: case 19: case 20: case 21: case 22: case 23: case 24: case 25: case 26:
            dst[0] = LOWP_FILL[spec->dtype - 17][small];
            break;
        default:
            /* Integers 0..9: little-endian bytes of `small` are correct for every width and signedness. */
            memset(dst, 0, size);
            dst[0] = (unsigned char)small;
            break;
        }
    }
}

/* ---- string tensors (docs/STRINGS.md): .npy 'U' (UTF-32) or 'S' (bytes) <-> arrays of NUL-terminated UTF-8 ---- */

/* Code point `c` as UTF-8 at out (4 bytes of room); U+FFFD for a surrogate or a value past U+10FFFF. */
static size_t utf8_put(uint32_t c, unsigned char *out)
{
    if (c >= 0xD800 && c <= 0xDFFF)
        c = 0xFFFD;
    if (c > 0x10FFFF)
        c = 0xFFFD;
    if (c < 0x80) {
        out[0] = (unsigned char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (unsigned char)(0xC0 | c >> 6), out[1] = (unsigned char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (unsigned char)(0xE0 | c >> 12), out[1] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
        out[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | c >> 18), out[1] = (unsigned char)(0x80 | (c >> 12 & 0x3F));
    out[2] = (unsigned char)(0x80 | (c >> 6 & 0x3F)), out[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

/* The next code point of the NUL-terminated UTF-8 at *p (advanced past it). An ill-formed sequence gives one U+FFFD
   per maximal subpart, as Python's errors="replace" does: a byte that cannot start a sequence (80-C1, F5-FF) is one,
   and a sequence cut short is one for its lead and the continuation bytes that were still valid (E0 takes A0-BF
   next, ED 80-9F, F0 90-BF, F4 80-8F: no overlong form, surrogate or code point past U+10FFFF). */
static uint32_t utf8_next(const unsigned char **p)
{
    const unsigned char *s = *p;
    uint32_t c = s[0];
    int more = c >= 0xF0 && c <= 0xF4 ? 3 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xC2 && c <= 0xDF ? 1 : 0;
    if (c < 0x80 || more == 0) {
        *p = s + 1;
        return c < 0x80 ? c : 0xFFFD;
    }
    unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    uint32_t v = c & (0x3F >> more);
    for (int i = 1; i <= more; i++) {
        if (s[i] < lo || s[i] > hi) {
            *p = s + i;
            return 0xFFFD;
        }
        v = v << 6 | (s[i] & 0x3F);
        lo = 0x80, hi = 0xBF;
    }
    *p = s + more + 1;
    return v;
}

int fxc_npy_read_strings(const char *path, const fxc_tensor_spec *spec, const char **text, char **pool, char *err,
                         size_t err_len)
{
    int fortran;
    int32_t rank;
    int64_t shape[FXC_NPY_MAX_RANK], width;
    const dtype_info *kind;
    *pool = NULL;
    FILE *fh = npy_open_any(path, spec, &rank, shape, &fortran, &kind, &width, err, err_len);
    if (!fh)
        return -1;
    int same_shape = rank == spec->rank;
    size_t count = 1;
    for (int32_t d = 0; same_shape && d < rank; d++) {
        same_shape = shape[d] == spec->shape[d];
        count *= (size_t)shape[d];
    }
    if (!same_shape)
        return shape_mismatch(fh, path, spec, rank, shape, err, err_len);
    size_t unit = (size_t)kind->size, item = (size_t)width * unit;
    if (width > (1 << 24) || (item && count > SIZE_MAX / 4 / (item + 1))) {
        fclose(fh);
        return fail(err, err_len, "%s: strings too wide (%lld characters)", path, (long long)width);
    }
    unsigned char *raw = malloc(count * item + 1);
    char *out = malloc(count * ((size_t)width * 4 + 1) + 1);
    if (!raw || !out) {
        free(raw), free(out), fclose(fh);
        return fail(err, err_len, "%s: out of memory", path);
    }
    if (npy_data(fh, path, fortran, rank, shape, raw, count * item, err, err_len) != 0) {
        free(raw), free(out);
        return -1;
    }
    size_t used = 0;
    for (size_t e = 0; e < count; e++) {
        text[e] = out + used;
        for (int64_t j = 0; j < width; j++) {
            const unsigned char *at = raw + e * item + (size_t)j * unit;
            uint32_t c = unit == 4 ? (uint32_t)at[0] | (uint32_t)at[1] << 8 | (uint32_t)at[2] << 16 | (uint32_t)at[3] << 24 : at[0];
            if (c == 0)
                break; /* numpy pads with NULs; a C string ends at its first */
            if (unit == 4)
                used += utf8_put(c, (unsigned char *)out + used);
            else
                out[used++] = (char)c;
        }
        out[used++] = '\0';
    }
    free(raw);
    *pool = out;
    return 0;
}

int fxc_npy_write_strings(const char *path, const fxc_tensor_spec *spec, const char *const *text, char *err,
                          size_t err_len)
{
    size_t count = 1, width = 1;
    for (int32_t d = 0; d < spec->rank; d++)
        count *= (size_t)spec->shape[d];
    for (size_t e = 0; e < count; e++) {
        size_t n = 0;
        for (const unsigned char *p = (const unsigned char *)text[e]; *p; n++)
            (void)utf8_next(&p);
        width = n > width ? n : width;
    }
    uint32_t *data = calloc(count * width + 1, sizeof *data);
    if (!data)
        return fail(err, err_len, "%s: out of memory", path);
    for (size_t e = 0; e < count; e++) {
        size_t j = 0;
        for (const unsigned char *p = (const unsigned char *)text[e]; *p; j++) {
            uint32_t c = utf8_next(&p);
            unsigned char *le = (unsigned char *)&data[e * width + j];
            le[0] = (unsigned char)c, le[1] = (unsigned char)(c >> 8), le[2] = (unsigned char)(c >> 16), le[3] = (unsigned char)(c >> 24);
        }
    }
    fxc_tensor_spec as_chars = *spec;
    as_chars.dtype = 8;
    as_chars.nbytes = count * width * 4;
    int rc = npy_write(path, &as_chars, "<U", (int64_t)width, data, err, err_len);
    free(data);
    return rc;
}
