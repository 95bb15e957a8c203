/* The spawn helper's static program (helper_main.c), built first and embedded here
 * as it is: the server writes these bytes to a sealed memfd and execs it (spawner.c),
 * so no install path has to be found and the helper always matches its library. */
#include "runner/spawn/helper.h"

#ifndef MQPROC_HELPER_PATH
#error "MQPROC_HELPER_PATH: the built helper program (CMakeLists.txt sets it)"
#endif

__asm__(".section .rodata\n"
        ".balign 16\n"
        ".globl mqproc__helper_image\n"
        ".hidden mqproc__helper_image\n"
        "mqproc__helper_image:\n"
        ".incbin \"" MQPROC_HELPER_PATH "\"\n"
        ".globl mqproc__helper_image_end\n"
        ".hidden mqproc__helper_image_end\n"
        "mqproc__helper_image_end:\n"
        ".previous\n");
