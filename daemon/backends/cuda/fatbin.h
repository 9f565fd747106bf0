/* The embedded CUDA fatbin: where it is, what images it holds, which one a device loads. */
#ifndef GLLMD_FATBIN_H
#define GLLMD_FATBIN_H

#include <stdbool.h>
#include <stddef.h>

#define FATBIN_MAX_IMAGES 16

struct fatbin_image {
    bool ptx;        /* PTX (JIT-compiled by the driver) or SASS (an ELF cubin) */
    int arch;        /* e.g. 90 for sm_90 / compute_90 */
    const void *payload;     /* the image as stored (PTX may be compressed) */
    size_t payload_size;
};

const void *fatbin_data(void);
size_t fatbin_size(void);
/* Lists the images of a fatbin; returns their count or -1 if it is not one. */
int fatbin_images(const void *data, size_t size, struct fatbin_image *out, int max);
/* The image the driver will pick for compute capability major.minor: SASS of the
 * same major and the highest minor not above the device's (sm_90a runs on 9.0
 * only), else the newest PTX not above it. Writes e.g. "sm_90 SASS" or
 * "compute_80 PTX (JIT)"; returns false when nothing fits. */
bool fatbin_choose(const struct fatbin_image *imgs, int n, int major, int minor, char *buf,
                   size_t len);

#endif
