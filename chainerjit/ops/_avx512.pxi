# Whether the loops written for AVX-512 run here, included by the
# ``_loops_*.pyx`` modules that have such loops (before them): they are
# compiled where GCC targets x86-64 (``CJ_AVX512``), each in a function
# built for AVX-512 and FMA alone, and called only where the CPU has both.

cdef extern from *:
    """
    #if defined(__GNUC__) && defined(__x86_64__)
    #include <immintrin.h>
    #define CJ_AVX512 1
    static int cj_avx512_fma(void) {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("fma");
    }
    #else
    static int cj_avx512_fma(void) {
        return 0;
    }
    #endif
    """
    int cj_avx512_fma() nogil
