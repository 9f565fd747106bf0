/* The CPU attention kernel built for x86-64-v3 (flags: CMakeLists.txt). */
#define FA_TASK fa_task_x86_64_v3
#include "cpu_fa_kernel.h"
