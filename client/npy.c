/* .npy format (versions 1-3): a magic string, a Python-dict header, then raw C-order data. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"

#define NPY_MAX_HEADER 65536

/* Finds the value text after 'key': in the header dict. */
static const char *dict_value(const char *hdr, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(hdr, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    while (*p == ' ' || *p == ':')
        p++;
    return p;
}

static int parse_header(const char *hdr, struct npy *a, char *err, size_t errlen)
{
    const char *d = dict_value(hdr, "descr"), *f = dict_value(hdr, "fortran_order"),
               *s = dict_value(hdr, "shape");
    if (!d || !f || !s) {
        snprintf(err, errlen, "header lacks descr, fortran_order or shape");
        return GLLM_EPARAM;
    }
    if (strncmp(d, "'<f4'", 5) == 0)
        a->dtype = GLLM_DTYPE_F32;
    else if (strncmp(d, "'<f2'", 5) == 0)
        a->dtype = GLLM_DTYPE_F16;
    else {
        /* The whole descr, as numpy wrote it: '<f8', '|u1', '<V2', ... */
        size_t n = 0;
        if (*d == '\'')
            while (d[1 + n] && d[1 + n] != '\'' && n < 32)
                n++;
        snprintf(err, errlen, "dtype '%.*s' is not supported: .npy files must be float32 ('<f4') "
                 "or float16 ('<f2'); convert with numpy's x.astype(numpy.float32)",
                 (int)n, d + 1);
        return GLLM_EDTYPE;
    }
    if (strncmp(f, "False", 5) != 0) {
        snprintf(err, errlen, "Fortran-ordered arrays are not supported");
        return GLLM_EPARAM;
    }
    if (*s != '(') {
        snprintf(err, errlen, "malformed shape");
        return GLLM_EPARAM;
    }
    s++;
    a->rank = 0;
    a->count = 1;
    for (;;) {
        while (*s == ' ' || *s == ',')
            s++;
        if (*s == ')')
            break;
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (end == s || errno || v < 0 || a->rank == NPY_MAX_RANK) {
            snprintf(err, errlen, "malformed or too long shape");
            return GLLM_EPARAM;
        }
        a->shape[a->rank++] = v;
        if (__builtin_mul_overflow(a->count, (size_t)v, &a->count)) {
            snprintf(err, errlen, "shape too large");
            return GLLM_EOVERFLOW;
        }
        s = end;
    }
    return 0;
}

int npy_load(const char *path, struct npy *out, char *err, size_t errlen)
{
    struct npy a = {0};
    char *hdr = NULL;
    int r = GLLM_EPARAM;
    FILE *f = fopen(path, "rbe");
    if (!f) {
        r = -errno;
        snprintf(err, errlen, "%s", gllm_strerror(r));
        return r;
    }
    unsigned char pre[10];
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        snprintf(err, errlen, "not a .npy file");
        goto out;
    }
    size_t hlen;
    if (pre[6] == 1) {
        hlen = pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        unsigned char more[2];
        if (fread(more, 1, 2, f) != 2)
            goto trunc;
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)more[0] << 16 | (size_t)more[1] << 24;
    } else {
        snprintf(err, errlen, ".npy version %d not supported", pre[6]);
        goto out;
    }
    if (hlen > NPY_MAX_HEADER) {
        snprintf(err, errlen, "header too large");
        goto out;
    }
    hdr = malloc(hlen + 1);
    if (!hdr) {
        r = -ENOMEM;
        goto out;
    }
    if (fread(hdr, 1, hlen, f) != hlen)
        goto trunc;
    hdr[hlen] = '\0';
    if ((r = parse_header(hdr, &a, err, errlen)) < 0)
        goto out;
    size_t bytes;
    if (__builtin_mul_overflow(a.count, gllm_dtype_size(a.dtype), &bytes)) {
        snprintf(err, errlen, "shape too large");
        r = GLLM_EOVERFLOW;
        goto out;
    }
    a.data = malloc(bytes ? bytes : 1);
    if (!a.data) {
        r = -ENOMEM;
        snprintf(err, errlen, "out of memory for %zu bytes", bytes);
        goto out;
    }
    if (fread(a.data, 1, bytes, f) != bytes)
        goto trunc;
    fclose(f);
    free(hdr);
    *out = a;
    return 0;
trunc:
    snprintf(err, errlen, "file is truncated");
    r = GLLM_EPARAM;
out:
    fclose(f);
    free(hdr);
    free(a.data);
    return r;
}

int npy_save(const char *path, const struct npy *a, char *err, size_t errlen)
{
    char dict[256], shape[160] = "";
    size_t used = 0;
    for (int i = 0; i < a->rank; i++)
        used += (size_t)snprintf(shape + used, sizeof shape - used, "%lld,%s",
                                 (long long)a->shape[i], i + 1 < a->rank ? " " : "");
    if (a->rank > 1)
        shape[used - 1] = '\0';   /* (2, 3) not (2, 3,); a 1-tuple keeps its comma */
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                     a->dtype == GLLM_DTYPE_F32 ? "<f4" : "<f2", shape);
    /* Pad with spaces so magic + header length + header is a multiple of 64, ending in \n. */
    size_t total = 10 + (size_t)n + 1;
    size_t pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wbe");
    if (!f) {
        int r = -errno;
        snprintf(err, errlen, "%s", gllm_strerror(r));
        return r;
    }
    uint16_t hlen = (uint16_t)((size_t)n + pad + 1);
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                             (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
    size_t bytes = a->count * gllm_dtype_size(a->dtype);
    bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)n, f) == (size_t)n;
    for (size_t i = 0; ok && i < pad; i++)
        ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF && fwrite(a->data, 1, bytes, f) == bytes;
    if (fclose(f) != 0)
        ok = false;
    if (!ok) {
        snprintf(err, errlen, "write failed");
        return -EIO;
    }
    return 0;
}

void npy_free(struct npy *a)
{
    free(a->data);
    a->data = NULL;
}
