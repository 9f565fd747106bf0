/* The CPU attention kernel built for the compiler's default target: any CPU. */
#define FA_TASK fa_task_generic
#include "cpu_fa_kernel.h"
