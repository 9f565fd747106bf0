/* The embedded SPIR-V and its pipelines (see vk_pipeline.h). */
#include <stdio.h>
#include <string.h>

#include "gllm/errors.h"
#include "pk_params.h"
#include "vk_pipeline.h"

#define IMAGE(sym) extern const char sym[], sym##_end[];
IMAGE(gllm_spv_attn_f32) IMAGE(gllm_spv_attn_f16) IMAGE(gllm_spv_attn_bf16)
IMAGE(gllm_spv_paged_f32) IMAGE(gllm_spv_paged_f16) IMAGE(gllm_spv_paged_bf16)
IMAGE(gllm_spv_append)
#undef IMAGE

const struct vk_spirv *vk_spirv_image(enum pk_kernel k)
{
#define ENTRY(e, n, sym) [e] = {n, (const uint32_t *)sym, 0}
    static struct vk_spirv t[PK_NKERNELS] = {
        ENTRY(PK_ATTN_F32, "attn_f32", gllm_spv_attn_f32),
        ENTRY(PK_ATTN_F16, "attn_f16", gllm_spv_attn_f16),
        ENTRY(PK_ATTN_BF16, "attn_bf16", gllm_spv_attn_bf16),
        ENTRY(PK_PAGED_F32, "paged_f32", gllm_spv_paged_f32),
        ENTRY(PK_PAGED_F16, "paged_f16", gllm_spv_paged_f16),
        ENTRY(PK_PAGED_BF16, "paged_bf16", gllm_spv_paged_bf16),
        ENTRY(PK_APPEND, "append", gllm_spv_append),
    };
#undef ENTRY
    static const char *const ends[PK_NKERNELS] = {
        gllm_spv_attn_f32_end, gllm_spv_attn_f16_end, gllm_spv_attn_bf16_end,
        gllm_spv_paged_f32_end, gllm_spv_paged_f16_end, gllm_spv_paged_bf16_end,
        gllm_spv_append_end,
    };
    if ((unsigned)k >= PK_NKERNELS)
        return NULL;
    t[k].bytes = (size_t)(ends[k] - (const char *)t[k].words);
    return &t[k];
}

const char *vk_spirv_line(void)
{
    static char line[96];
    size_t total = 0;
    for (int k = 0; k < PK_NKERNELS; k++)
        total += vk_spirv_image((enum pk_kernel)k)->bytes;
    snprintf(line, sizeof line, "vulkan: %d SPIR-V kernels (%zu bytes, subgroup path)",
             PK_NKERNELS, total);
    return line;
}

static int make_one(struct vk_dev *d, struct vk_pipes *ps, enum pk_kernel k, char *why, size_t len)
{
    const struct vk_fns *fn = d->fn;
    const struct vk_spirv *img = vk_spirv_image(k);
    /* A SPIR-V module starts with its magic number; a truncated embed would not. */
    if (img->bytes < 20 || img->bytes % 4 || img->words[0] != 0x07230203u) {
        snprintf(why, len, "embedded SPIR-V %s is not a SPIR-V module", img->name);
        return GLLM_EBACKEND;
    }
    const VkShaderModuleCreateInfo mi = {
        .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
        .codeSize = img->bytes,
        .pCode = img->words,
    };
    VkShaderModule mod;
    VkResult r = fn->vkCreateShaderModule(d->dev, &mi, NULL, &mod);
    if (r != VK_SUCCESS) {
        snprintf(why, len, "vkCreateShaderModule(%s): %s", img->name, vk_result_name(r));
        return vk_code(r);
    }
    /* 0: the wave, 1: keys per step, 2: the workgroup (four waves). */
    const int32_t values[3] = {(int32_t)d->phys.subgroup, (int32_t)ps->keys,
                               (int32_t)(PK_WAVES * d->phys.subgroup)};
    const VkSpecializationMapEntry map[3] = {
        {0, 0, 4}, {1, 4, 4}, {2, 8, 4},
    };
    const VkSpecializationInfo spec = {3, map, sizeof values, values};
    const bool attend = k != PK_APPEND;
    const VkPipelineShaderStageRequiredSubgroupSizeCreateInfo size = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO,
        .requiredSubgroupSize = d->phys.subgroup,
    };
    /* The kernels take gl_SubgroupID as their row and the subgroup size as their wave: full
     * subgroups of that size, required where the driver lets us say so. */
    const bool req = attend && d->phys.require_size;
    const VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {
            .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
            .pNext = req ? &size : NULL,
            .flags = req ? VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT : 0,
            .stage = VK_SHADER_STAGE_COMPUTE_BIT,
            .module = mod,
            .pName = "main",
            .pSpecializationInfo = attend ? &spec : NULL,
        },
        .layout = ps->layout,
    };
    r = fn->vkCreateComputePipelines(d->dev, VK_NULL_HANDLE, 1, &ci, NULL, &ps->p[k]);
    fn->vkDestroyShaderModule(d->dev, mod, NULL);
    if (r != VK_SUCCESS) {
        ps->p[k] = VK_NULL_HANDLE;
        snprintf(why, len, "vkCreateComputePipelines(%s): %s", img->name, vk_result_name(r));
        return vk_code(r);
    }
    return 0;
}

int vk_pipes_make(struct vk_dev *d, struct vk_pipes *out, char *why, size_t len)
{
    memset(out, 0, sizeof *out);
    /* Two tiles of keys x PK_MAX_D f32 each: as many keys as shared memory holds, up to 16. */
    const uint32_t per_key = 2u * PK_MAX_D * 4u;
    out->keys = d->phys.props.limits.maxComputeSharedMemorySize / per_key;
    if (out->keys > PK_KEYS)
        out->keys = PK_KEYS;
    const VkPushConstantRange push = {VK_SHADER_STAGE_COMPUTE_BIT, 0, 8};
    const VkPipelineLayoutCreateInfo li = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
        .pushConstantRangeCount = 1,
        .pPushConstantRanges = &push,
    };
    VkResult r = d->fn->vkCreatePipelineLayout(d->dev, &li, NULL, &out->layout);
    if (r != VK_SUCCESS) {
        out->layout = VK_NULL_HANDLE;
        snprintf(why, len, "vkCreatePipelineLayout: %s", vk_result_name(r));
        return vk_code(r);
    }
    for (int k = 0; k < PK_NKERNELS; k++) {
        int rc = make_one(d, out, (enum pk_kernel)k, why, len);
        if (rc < 0) {
            vk_pipes_free(d, out);
            return rc;
        }
    }
    return 0;
}

void vk_pipes_free(struct vk_dev *d, struct vk_pipes *p)
{
    for (int k = 0; k < PK_NKERNELS; k++)
        if (p->p[k])
            d->fn->vkDestroyPipeline(d->dev, p->p[k], NULL);
    if (p->layout)
        d->fn->vkDestroyPipelineLayout(d->dev, p->layout, NULL);
    memset(p, 0, sizeof *p);
}
