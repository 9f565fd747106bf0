/* gllmd --capabilities: what every compiled-in backend declares it computes (dtypes, head
 * dims, modes, variant fields), as JSON, without opening a device. docs/backends.md's table
 * is generated from it (tests/caps_table.py). */
#include <stdio.h>

#include "backend.h"
#include "capabilities.h"
#include "proto.h"

static void names(FILE *f, uint32_t bits, const char *(*name)(uint32_t bit))
{
    fputc('[', f);
    int n = 0;
    for (int b = 0; b < 32; b++)
        if (bits & (1u << b))
            fprintf(f, "%s\"%s\"", n++ ? ", " : "", name(1u << b));
    fputc(']', f);
}

static const char *dtype_name(uint32_t bit)
{
    int d = 0;
    while (d < 31 && !(bit & (1u << d)))
        d++;
    return proto_dtype_name((gllm_dtype)d);
}

static void mode_json(FILE *f, const struct proto_mode_caps *m, uint32_t dtypes)
{
    fputs("{\"dtypes\": ", f);
    names(f, dtypes, dtype_name);
    fprintf(f, ", \"max_head_dim\": %llu, \"head_dims\": ", (unsigned long long)m->max_head_dim);
    if (m->n_head_dims == 0) {
        fputs("null", f);
    } else {
        fputc('[', f);
        for (uint32_t i = 0; i < m->n_head_dims && i < GLLM_MAX_MODE_HEAD_DIMS; i++)
            fprintf(f, "%s%llu", i ? ", " : "", (unsigned long long)m->head_dims[i]);
        fputc(']', f);
    }
    fputs(", \"variants\": ", f);
    names(f, m->variants, proto_variant_name);
    fputc('}', f);
}

void capabilities_print(FILE *f)
{
    fprintf(f, "{\"gllmd\": \"%s\", \"backends\": [", GLLM_VERSION);
    for (size_t i = 0; i < backend_registered(); i++) {
        const char *name;
        bool by_auto;
        struct backend_caps caps;
        bool declared = backend_declared(i, &name, &by_auto, &caps);
        fprintf(f, "%s\n  {\"name\": \"%s\", \"auto\": %s, \"declared\": %s", i ? "," : "",
                name, by_auto ? "true" : "false", declared ? "true" : "false");
        if (declared) {
            struct proto_mode_caps m[GLLM_MODE_COUNT];
            uint32_t dtypes[GLLM_MODE_COUNT];
            backend_caps_modes(&caps, m, dtypes);
            fputs(", \"modes\": {", f);
            for (int k = 0; k < GLLM_MODE_COUNT; k++) {
                fprintf(f, "%s\"%s\": ", k ? ", " : "", proto_mode_name((gllm_mode)k));
                mode_json(f, &m[k], dtypes[k]);
            }
            fputc('}', f);
        }
        fputc('}', f);
    }
    fputs("\n]}\n", f);
}
